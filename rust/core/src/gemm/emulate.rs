//! Emulated low-precision accumulation: every add is `acc = round(acc + a*b)`,
//! the exact sum rounded once into the accumulator format.
//!
//! How the exact sum is rounded once:
//! 1. `a*b` is exact in f64 (checked from the input formats: precisions add up
//!    to at most 53 bits and the exponent range stays inside f64).
//! 2. `s + e = acc + a*b` exactly, by TwoSum (s = fl(acc + p), e its error).
//! 3. `x = s` with its last bit forced odd when `e != 0` ("round to odd" at 53
//!    bits). For any target of at most 51 bits of precision, rounding `x` gives
//!    the same result as rounding the exact sum, in every deterministic mode:
//!    `x` lies strictly between the same two 52-bit neighbours as the exact sum,
//!    so it sits on the same side of every rounding boundary and tie.
//! 4. `x` is rounded into the format: floats of <= 51 bits with subnormals by a
//!    branch-light bit routine, equal to `Format::encode` (tested against it),
//!    anything else through `Format::encode`/`decode`. float64 accumulators use
//!    `s`/`e` directly.
//!
//! Stochastic rounding of the k-th product's add into element (i, j) draws
//! `rbits` bits from [`StepRand`]: the top bits of a word of (row i, step k)
//! xor a word of (column j, step k), so a tile kernel reads them packed beside
//! A and B. The r-th chunk total's add draws them from the counter-based
//! [`Rng`], keyed by (element, step `K + r`). Results do not depend on the
//! thread count, and the products' bits of an element not on the number of
//! rows or columns.
//!
//! Paths (all give the same bits; `LOWP_ISA=scalar` runs the f64 path):
//! - float16 and bfloat16 accumulators in nearest-even, float8_e5m2 in
//!   nearest-even from products of up to 24 bits, and float16, bfloat16,
//!   float32 or float8_e5m2 accumulators toward zero, up or down, not
//!   saturating, AVX2+FMA+F16C
//!   ([`drive16`]): register tiles of `MR x 16` f32 accumulators over a depth
//!   block, A and B packed to f32. The fp16 rounding is `vcvtps2ph` with the
//!   mode's rounding control (IEEE overflow) and back; the bf16 rounding is
//!   the integer nearest-even of the f32 bit pattern's top 16 bits.
//!   Nearest-even with products of two named fp8 formats ([`FMA16_INPUTS`],
//!   at most 8 bits): `fma(a, b, acc)` then the rounding, a double rounding
//!   that is innocuous (11- or 8-bit operands, 24 >= 2*11 + 1 bits; checked
//!   exhaustively by the tests); the rounding is Veltkamp's split (three float
//!   operations, [`Kind16::Split`]) in depth blocks whose values keep every sum
//!   in its range ([`split_ok`]), else the conversion. The same into other
//!   IEEE-style formats of at most 11 bits whose subnormals are f32 normals
//!   (FloatFormat(6, 9): Veltkamp's split at 10 bits), from products of no
//!   more bits than the format has and on its grid ([`split_fmt`]); depth
//!   blocks whose values could pass its largest value run through the f64
//!   rounding; chunk totals into the same format by the f32 add and the split
//!   ([`flush_split`]). Into such a format from products of at most 8 bits
//!   off its grid (float8_e5m2 from fp8): on values scaled so that the
//!   format's subnormals are f32's ([`unit_scale`]), the FMA, then the
//!   integer nearest-even rounding of the pattern at the format's unit bit
//!   ([`Kind16::UnitNe`]), in depth blocks whose products stay below
//!   2^(sub + 23) and whose sums stay below the largest value ([`near_ok`]).
//!   Nearest-even with products of 20 to 24 bits
//!   (float16 inputs) into bfloat16, or into float16 on 2 to 12 rows: the FMA
//!   too, except for vectors where a sum could sit on a midpoint of the format
//!   ([`Kind16::Mid`]); into float16 otherwise, as bfloat16 inputs below. The directed modes, any inputs whose values are f32:
//!   the FMA rounded in the mode itself (MXCSR, inside one assembly block),
//!   then `vcvtps2ph` in the mode, the integer rounding of the top 16 bits,
//!   nothing for float32, or through float16 for float8_e5m2 ([`Kind16::Dir`]);
//!   into float16, float8_e5m2 and other IEEE-style formats of at most 10
//!   mantissa bits whose normal range f32 holds (FloatFormat(6, 9)), on values
//!   scaled so that the format's subnormals are f32's ([`unit_scale`]),
//!   bfloat16's integer rounding at the format's unit ([`DirTo::Unit`]) in
//!   depth blocks whose values keep every sum below its largest value, or
//!   (up or down) whose products stay below the unit of its top binade, where
//!   the sums that pass it on the side of the infinity stay past it and are
//!   set to that infinity after the block ([`sided_ok`]), and whose A values
//!   scale exactly, the others through the conversions
//!   (float16, float8_e5m2) or the f64 rounding;
//!   chunk totals into those formats (and into float32 to nearest) by the same
//!   rounding of an f32 add.
//!   Nearest-even with other inputs whose products fit 24 bits (bfloat16
//!   inputs): the sum rounded to odd at 24 bits, from the FMA toward zero and
//!   a second FMA for the residual ([`tile16_oddz`]; innocuous before any
//!   rounding to <= 22 bits), when the values of the depth block keep every
//!   product exact in f32 (exponent scan of the packed block); otherwise that
//!   block runs through the f64 rounding; into float8_e5m2, rounded to odd
//!   again at float16 ([`Kind16::OddE5m2`]). A product of at most 12 rows
//!   with a row-major bfloat16 or float16 B reads B's codes in place
//!   ([`BSrc::Codes`]) in these kinds and kind Dir (kind Odd into float16 on
//!   tiles of 4 rows, not 6); one with a row-major float8_e5m2 or
//!   float8_e4m3fn B in kinds Split (and its fallback Fma), UnitNe and Dir,
//!   likewise. Chunk totals into float16 or
//!   bfloat16, to nearest, use TwoSum in f32 and round to odd.
//!   Stochastic into float16, bfloat16 and other IEEE-style formats of 2 to
//!   10 mantissa bits whose normal range f32 holds, with at most `23 - man`
//!   random bits (13 for float16, 16 for bfloat16), on values scaled as for
//!   `Unit` ([`Kind16::Sr`]): the FMA toward zero truncates the exact sum to 24
//!   bits (or at 2^-149, below the scaled smallest normal), which keeps the
//!   bits the decision reads; each lane's random bits are a packed row word
//!   xor a packed column word ([`tile16_sr`]). Depth blocks whose values could
//!   take a sum past the largest value run in runs checked at their starts,
//!   then watch their sums ([`sr_watched`]); those whose A values do not scale
//!   exactly run through the f64 rounding. With more random bits (32 by
//!   default) from float8 E4M3 products: the same kernel on the top bits,
//!   and a tile whose sums were not all exact in f32 and met a tie of those
//!   bits (a second pass finds ties) redone on f64 lanes ([`Kind16::Sr`]). Directed modes into float8_e5m2
//!   past those bounds: the unit-bit kernel in checked runs ([`tile16_dir_runs`]),
//!   then the conversions.
//! - every other [`Fast`] format and mode:
//!   register tiles of 4 rows x 8 columns of f64 accumulators over the steps
//!   up to the next chunk end, reading B's panel and the column words tile by
//!   tile. Stochastic with at least one bit of the f64 significand below the
//!   random bits (`man + rbits <= 51`: float16 and bfloat16 with the default
//!   32 bits): [`tile64_sr`], on values scaled so that the format's
//!   subnormals are f64's, the FMA toward zero (which keeps every bit the
//!   decision reads), then an integer add of the placed row word xor column
//!   word and a truncation, four vector operations an add; unless a bound on
//!   the block's values keeps the sums below the largest value, it runs in
//!   runs checked at their starts ([`tile64_sr_runs`]), then watches the
//!   rounded sums. With more bits (float32 with the default 32) the same
//!   kernel, on the top `52 - man` bits, where every f64 sum of the tile is
//!   exact (MXCSR's precision flag after it; [`Fast::sr_checked`]); other
//!   tiles take the path below. To nearest (even or away) where the block's
//!   sums need not be exact in f64 (float32 inputs of 24 bits: 48-bit
//!   products): [`tile64_ne`], on values scaled as for [`tile64_sr`], the FMA
//!   toward zero and half a unit added to the pattern, then the truncation
//!   (the truncated sum sits on the same side of every midpoint as the exact
//!   one), six vector operations an add; a tile where some truncated sum lay
//!   exactly on a midpoint (nearest-even: only there can it differ from
//!   nearest-away) takes the path below, as does one whose steps no bound
//!   keeps below the largest value, in segments of 64, 16 or 4 steps.
//!   Stochastic products of at most [`FEW_ROWS`] rows with at most 32 bits,
//!   where [`tile64_sr`] runs: [`sr64_rows`], the same adds
//!   on one or two rows x 16 columns, B's values read once (bfloat16 and
//!   float16 codes in place, each depth block scanned for its bounds; those
//!   of a B whose columns are contiguous moved into rows of 16 first
//!   ([`transpose16`]); others packed 16 columns at a time) and the columns'
//!   words drawn in the kernel
//!   from their Weyl values ([`StepRand::col_weyl`]) instead of placed in
//!   panels, which one row would read once; blocks it cannot take run the step
//!   path.
//!   Otherwise (`rbits <= 32`, or deterministic modes;
//!   `tile_avx2`): the sum is the FMA when the
//!   formats, the block's values or the tile's own (exponent scans) make every
//!   sum exact in f64, else TwoSum and round to odd; in the normal
//!   range each mode is an integer add below the unit and a truncation, the
//!   stochastic one adding the placed row word xor column word. A
//!   tile where some sum leaves the normal range (or overflows, or meets
//!   inf/NaN) is redone by the step path below. A tile whose values show that
//!   no sum can (`Fast::quiet_ok`: products on the format's grid, a bound on
//!   the growth below the largest value) skips that watching. Chunk totals
//!   into a [`Fast`] format run through the same tile, one step at a time;
//!   stochastic ones into a format of [`Fast::sr_scale`] take the stochastic
//!   tile's add on a whole row of f64 lanes ([`flush64_sr`]).
//! - everything else, and tiles redone: 4 f64 lanes per step (`step_avx2`;
//!   stochastic: `step_st_avx2`, the random bits drawn in 8 u32 lanes), or the
//!   scalar f64 code.
// The module documentation describes the paths for maintainers (`cargo doc
// --document-private-items`), naming the private kernels it dispatches to.
#![allow(rustdoc::private_intra_doc_links)]

use super::{Operand, OutMat};
use crate::format::{named, Format};
use crate::parallel;
use crate::round::{Mode, RoundOpts, Rng, StepRand};
use crate::{Error, Result};

/// The accumulation to emulate.
#[derive(Clone, Copy, Debug)]
pub struct AccumSpec {
    /// Format every add rounds into.
    pub fmt: Format,
    /// `Some((C, F2))`: runs of C products accumulate in `fmt`, and each run's
    /// total is added into an accumulator of format F2.
    pub chunk: Option<(usize, Format)>,
    /// Rounding of every add (its `key` seeds stochastic rounding).
    pub opts: RoundOpts,
}

const SIGN: u64 = 1 << 63;
const INF_BITS: u64 = 0x7ff0_0000_0000_0000;

/// The error-free sum: `s + e == a + b` exactly (Knuth's TwoSum).
#[inline(always)]
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    (s, e)
}

/// [`two_sum`] that holds where its intermediate `s - a` overflows (operands of
/// opposite signs near float64's largest value, a finite sum: then `e` is NaN):
/// such a sum recomputed on the halves (exact there), its terms doubled.
#[inline(always)]
fn two_sum_big(a: f64, b: f64) -> (f64, f64) {
    let (s, e) = two_sum(a, b);
    if e.is_nan() && s.is_finite() {
        return halves_sum(a, b);
    }
    (s, e)
}

#[cold]
fn halves_sum(a: f64, b: f64) -> (f64, f64) {
    let (s, e) = two_sum(a * 0.5, b * 0.5);
    (s * 2.0, e * 2.0)
}

/// `s` rounded to odd with the sticky information of `e` (s + e exact, |e| <= ulp(s)/2).
#[inline(always)]
fn to_odd(s: f64, e: f64) -> f64 {
    let bits = s.to_bits();
    if e != 0.0 && bits & 1 == 0 && s.is_finite() {
        // Move one unit toward the exact value: +1 on the bits grows the
        // magnitude, -1 shrinks it (sign-magnitude encoding).
        let up = (e > 0.0) == (s > 0.0);
        f64::from_bits(if up { bits + 1 } else { bits - 1 })
    } else {
        s
    }
}

/// Rounding of an f64 that stands for the exact sum.
trait Round: Sync {
    const STOCHASTIC: bool;
    /// `round(a + b)` of the exact sum.
    fn add(&self, a: f64, b: f64, rand: u64) -> f64;
    /// Branch-free version for vector loops: the result, and whether the lane
    /// must be redone with [`Round::add`] (rare cases such as underflow).
    #[inline(always)]
    fn add_fast(&self, a: f64, b: f64, rand: u64) -> (f64, bool) {
        (self.add(a, b, rand), false)
    }
    /// One depth step for a row: `row[j] = round(row[j] + av*bp[j])`.
    fn step(&self, simd: bool, row: &mut [f64], bp: &[f64], av: f64, rands: &[u64], old: &mut [f64], bad: &mut [u8])
    where
        Self: Sized,
    {
        step(simd, self, row, bp, av, rands, old, bad)
    }
    /// A stochastic depth step that makes its own random bits (element `j`
    /// draws the top `rbits` of `u ^ vw[j]`, [`StepRand`]); `false` if not
    /// available, and then the caller fills the bits and calls [`Round::step`].
    /// `exact`: every `acc + a*b` is exact in f64 (see [`sums_exact_f64`]).
    #[allow(clippy::too_many_arguments)]
    fn step_st(&self, _simd: bool, _row: &mut [f64], _bp: &[f64], _av: f64, _u: u64, _vw: &[u64], _rbits: u32, _exact: bool) -> bool {
        false
    }
    /// Are register tiles ([`Round::tile`] or [`Round::tile_sr`]) available?
    fn has_tile(&self, _simd: bool, _rbits: u32) -> bool {
        false
    }
    /// Depth steps on a register tile of `nr` rows x 8 columns (see
    /// [`Fast::tile_run`]); `false` leaves `acc` untouched for the step path.
    #[allow(clippy::too_many_arguments)]
    fn tile(&self, _simd: bool, _nr: usize, _acc: &mut [f64], _ldc: usize, _ap: &[f64], _bp: &[f64], _ldb: usize, _kn: usize, _words: Words, _rbits: u32, _exact: bool, _track: bool) -> bool {
        false
    }
    /// May a tile run without watching its sums (see [`Fast::quiet_ok`])?
    fn quiet(&self, _a: Bounds64, _b: Bounds64, _acc_max: f64, _kn: usize) -> bool {
        false
    }
    /// Are a tile's sums exact in f64, from its values (see [`Fast::exact_ok`])?
    fn exact_vals(&self, _acc: Bounds64, _acc_max: f64, _a: Bounds64, _b: Bounds64, _kn: usize) -> bool {
        false
    }
    /// The precision of the accumulator's values (bits).
    fn prec(&self) -> i32 {
        53
    }
    /// The power of two by which [`Round::tile_sr`] wants A's values scaled,
    /// when it is available (see [`Fast::sr_scale`]).
    fn sr_scale(&self, _simd: bool, _rbits: u32) -> Option<i32> {
        None
    }
    /// The stochastic register tile toward zero ([`Fast::tile_sr_run`]); `false`
    /// leaves `acc` untouched.
    #[allow(clippy::too_many_arguments)]
    fn tile_sr(&self, _nr: usize, _acc: &mut [f64], _ldc: usize, _aps: &[f64], _bp: &[f64], _ld: usize, _kn: usize, _words: Words, _rbits: u32, _a: Bounds64, _b: Bounds64) -> bool {
        false
    }
    /// The power of two by which [`Round::tile_ne`] wants A's values scaled,
    /// when it is available (see [`Fast::ne_scale`]).
    fn ne_tile_scale(&self, _simd: bool) -> Option<i32> {
        None
    }
    /// The register tile to nearest from sums toward zero ([`Fast::tile_ne_run`]);
    /// `false` leaves `acc` untouched.
    #[allow(clippy::too_many_arguments)]
    fn tile_ne(&self, _nr: usize, _acc: &mut [f64], _ldc: usize, _aps: &[f64], _bp: &[f64], _ld: usize, _kn: usize, _a: Bounds64, _b: Bounds64) -> bool {
        false
    }
    /// The stochastic kernel of few rows ([`Fast::rows_sr_run`]); `false`
    /// leaves `acc` untouched.
    ///
    /// # Safety
    /// As [`Fast::rows_sr_run`]'s.
    #[allow(clippy::too_many_arguments)]
    unsafe fn rows_sr(&self, _nr: usize, _w: usize, _acc: &mut [f64], _ldc: usize, _ap: &[f64], _up: &[u64], _blk: RowsBlock, _kn: usize, _rbits: u32, _a: Bounds64, _b: Bounds64) -> bool {
        false
    }
}

/// Float formats of <= 51 bits with subnormals, whose values are f64 normals.
#[derive(Clone, Copy, Debug)]
struct Fast<const M: u8> {
    man: u32,
    emin: i32,
    max_bits: u64,
    /// What overflow gives, for a positive and a negative value.
    ovf: [f64; 2],
    rbits: u32,
    fmt: Format,
    opts: RoundOpts,
}

const M_NE: u8 = 0;
const M_NA: u8 = 1;
const M_TZ: u8 = 2;
const M_UP: u8 = 3;
const M_DN: u8 = 4;
const M_ODD: u8 = 5;
const M_ST: u8 = 6;

fn mode_code(m: Mode) -> u8 {
    match m {
        Mode::NearestEven => M_NE,
        Mode::NearestAway => M_NA,
        Mode::TowardZero => M_TZ,
        Mode::Up => M_UP,
        Mode::Down => M_DN,
        Mode::Odd => M_ODD,
        Mode::Stochastic => M_ST,
    }
}

/// `$body` with the const `$c: $t` set to the value `$v`: one arm per listed
/// constant, `$d` for any other value, so that `$body` can pass `$c` as a
/// const parameter.
macro_rules! by_const {
    ($v:expr, $c:ident: $t:ty, [$($k:path),*], $d:path => $body:expr) => {
        match $v {
            $($k => {
                const $c: $t = $k;
                $body
            })*
            _ => {
                const $c: $t = $d;
                $body
            }
        }
    };
}

/// `$body` with the const `$c` set to the mode code `$m` (so that `$body` can
/// name `Fast::<$c>`).
macro_rules! by_mode {
    ($m:expr, $c:ident => $body:expr) => {
        by_const!($m, $c: u8, [M_NE, M_NA, M_TZ, M_UP, M_DN, M_ODD], M_ST => $body)
    };
}

/// Can [`Fast`] round into `fmt`? (Otherwise the generic path does.)
fn fast_ok(fmt: &Format) -> bool {
    match fmt {
        Format::Float(f) => {
            // (No mantissa bits: a code's parity is its exponent's, which the
            // significand-bit parity of `Fast::round` does not see.)
            f.subnormals
                && (1..=50).contains(&f.man_bits)
                && f.emin() - (f.man_bits as i32) > -1020
                && f.emax() < 1020
                && (f.inf || f.has_nan())
        }
        _ => false,
    }
}

impl<const M: u8> Fast<M> {
    /// The same format and options, rounding in mode `C`.
    fn as_mode<const C: u8>(&self) -> Fast<C> {
        Fast { man: self.man, emin: self.emin, max_bits: self.max_bits, ovf: self.ovf, rbits: self.rbits, fmt: self.fmt, opts: self.opts }
    }

    fn new(fmt: Format, opts: RoundOpts) -> Self {
        let Format::Float(f) = fmt else { unreachable!("fast_ok checked") };
        // What overflow gives: the format's own rounding of 4 times its largest value,
        // computed once per thread for the last format and options (a stack of small
        // products sets up the same ones for each).
        std::thread_local! {
            static OVF: std::cell::Cell<Option<(Format, RoundOpts, [f64; 2])>> = const { std::cell::Cell::new(None) };
        }
        let ovf = match OVF.with(|c| c.get()) {
            Some((f0, o0, v)) if f0 == fmt && o0 == opts => v,
            _ => {
                let big = f.max_value() * 4.0;
                let v = [fmt.decode(fmt.encode(big, &opts, 0)), fmt.decode(fmt.encode(-big, &opts, 0))];
                OVF.with(|c| c.set(Some((fmt, opts, v))));
                v
            }
        };
        Fast { man: f.man_bits, emin: f.emin(), max_bits: f.max_value().to_bits(), ovf, rbits: opts.rbits, fmt, opts }
    }

    #[cold]
    #[inline(never)]
    fn slow(&self, x: f64, rand: u64) -> f64 {
        self.fmt.decode(self.fmt.encode(x, &self.opts, rand))
    }

    #[inline(always)]
    fn round(&self, x: f64, rand: u64) -> f64 {
        let bits = x.to_bits();
        let mag = bits & !SIGN;
        if mag == 0 {
            return x;
        }
        let e = (mag >> 52) as i32 - 1023;
        if mag >= INF_BITS || e < self.emin - self.man as i32 {
            // inf, NaN, or below the smallest subnormal of the format.
            return self.slow(x, rand);
        }
        let neg = bits & SIGN != 0;
        // Bits of the f64 significand below the format's unit: 52 - man in the
        // normal range, more below it (fixed subnormal unit); 1 ..= 52 here.
        let d = 52 - self.man + (self.emin - e).max(0) as u32;
        let mask = (1u64 << d) - 1;
        let rem = mag & mask;
        let trunc = mag & !mask;
        // Parity of the truncated significand (bit 52 is the implicit one).
        let odd = ((mag | (1 << 52)) >> d) & 1 == 1;
        let half = 1u64 << (d - 1);
        let up = match M {
            M_NE => rem > half || (rem == half && odd),
            M_NA => rem >= half,
            M_TZ => false,
            M_UP => !neg && rem != 0,
            M_DN => neg && rem != 0,
            M_ODD => !odd && rem != 0,
            // The remainder as a 64-bit fraction of one unit, top rbits of it
            // against rbits random bits (as round::round_up).
            _ => rand < ((rem << (64 - d)) >> (64 - self.rbits)),
        };
        // Adding one unit to the bit pattern carries into the exponent exactly.
        let r = trunc + ((up as u64) << d);
        if r > self.max_bits {
            return self.ovf[neg as usize];
        }
        f64::from_bits(r | (bits & SIGN))
    }
}

impl<const M: u8> Fast<M> {
    /// [`Fast::round`] without branches (selects only), so loops over columns
    /// vectorize; `true` flags lanes (inf, NaN, below the smallest subnormal)
    /// that [`Fast::round`] must redo.
    #[inline(always)]
    fn round_nobranch(&self, x: f64, rand: u64) -> (f64, bool) {
        let bits = x.to_bits();
        let mag = bits & !SIGN;
        let neg = bits & SIGN != 0;
        let e = (mag >> 52) as i64 - 1023;
        let zero = mag == 0;
        let bad = !zero & ((mag >= INF_BITS) | (e < (self.emin - self.man as i32) as i64));
        // Bits below the unit, clamped to 1..=52 so that odd lanes stay well defined.
        let d = ((52 - self.man as i64) + (self.emin as i64 - e).max(0)).clamp(1, 52) as u64;
        let mask = (1u64 << d) - 1;
        let rem = mag & mask;
        let trunc = mag & !mask;
        // Parity of the truncated significand (bit 52 is the implicit one).
        let odd = ((mag | (1 << 52)) >> d) & 1 == 1;
        let half = 1u64 << (d - 1);
        let up = match M {
            M_NE => (rem > half) | ((rem == half) & odd),
            M_NA => rem >= half,
            M_TZ => false,
            M_UP => !neg & (rem != 0),
            M_DN => neg & (rem != 0),
            M_ODD => !odd & (rem != 0),
            // Top rbits of the remainder (a 64-bit fraction of one unit) against rbits random bits.
            _ => rand < ((rem << (64 - d)) >> (64 - self.rbits)),
        };
        // Adding one unit to the bit pattern carries into the exponent exactly.
        let r = trunc + ((up as u64) << d);
        let ovf = r > self.max_bits;
        let v = f64::from_bits(r | (bits & SIGN));
        let v = if ovf { self.ovf[neg as usize] } else { v };
        (if zero { x } else { v }, bad)
    }
}

/// `s` rounded to odd with the sticky information of `e`, without branches.
#[inline(always)]
fn to_odd_nobranch(s: f64, e: f64) -> f64 {
    let bits = s.to_bits();
    let fix = (e != 0.0) & (bits & 1 == 0);
    let grow = (e > 0.0) == (s > 0.0);
    // +1 on the bits grows the magnitude, -1 shrinks it; inf/NaN lanes are redone anyway.
    let delta = if grow { 1u64 } else { u64::MAX };
    f64::from_bits(if fix { bits.wrapping_add(delta) } else { bits })
}

/// `a + p` on 4 f64 lanes: the nearest sum `s`, and `x`, the exact sum rounded
/// to odd at 53 bits (TwoSum, then where the error is nonzero and `s` even one
/// unit toward the exact sum: +1 on the bits grows |s|, -1 shrinks it), both
/// as bits. Lanes where `s` is inf/NaN come out unspecified in `x`.
///
/// # Safety
/// The CPU must support avx2.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sum_odd_x4(a: std::arch::x86_64::__m256d, p: std::arch::x86_64::__m256d) -> (std::arch::x86_64::__m256i, std::arch::x86_64::__m256i) {
    use std::arch::x86_64::*;
    // SAFETY: avx2 per the caller.
    unsafe {
        let (one, zero) = (_mm256_set1_epi64x(1), _mm256_setzero_si256());
        let s = _mm256_add_pd(a, p);
        let bb = _mm256_sub_pd(s, a);
        let e = _mm256_add_pd(_mm256_sub_pd(a, _mm256_sub_pd(s, bb)), _mm256_sub_pd(p, bb));
        let sb = _mm256_castpd_si256(s);
        let enz = _mm256_castpd_si256(_mm256_cmp_pd::<_CMP_NEQ_UQ>(e, _mm256_setzero_pd()));
        let even = _mm256_cmpeq_epi64(_mm256_and_si256(sb, one), zero);
        let diff = _mm256_cmpgt_epi64(zero, _mm256_xor_si256(sb, _mm256_castpd_si256(e))); // signs differ
        let delta = _mm256_or_si256(diff, one); // -1 or +1
        (sb, _mm256_add_epi64(sb, _mm256_and_si256(delta, _mm256_and_si256(enz, even))))
    }
}

impl<const M: u8> Fast<M> {
    /// Redo exactly, from their old accumulators `olds`, the lanes `j + l` of the
    /// vector step flagged in `bm` (inf/NaN sums, values outside the bit routine's range).
    /// Callers pass the old vector as its lanes (a transmute: any bit pattern is an f64).
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn redo4(&self, row: &mut [f64], j: usize, bm: i32, olds: [f64; 4], av: f64, bp: &[f64], rands: &[u64]) {
        for (l, &o) in olds.iter().enumerate() {
            if bm & (1 << l) != 0 {
                row[j + l] = self.add(o, av * bp[j + l], rands[j + l]);
            }
        }
    }

    /// The depth step on 4 f64 lanes with AVX2 intrinsics: the same operations
    /// as `add_fast` (TwoSum, round to odd, the bit-level rounding), lane-wise.
    ///
    /// # Safety
    /// The CPU must support avx2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn step_avx2(&self, row: &mut [f64], bp: &[f64], av: f64, rands: &[u64]) {
        use std::arch::x86_64::*;
        let n = row.len();
        let (bp, rands) = (&bp[..n], &rands[..n]);
        let sign = _mm256_set1_epi64x(SIGN as i64);
        let one = _mm256_set1_epi64x(1);
        let zero = _mm256_setzero_si256();
        let inf = _mm256_set1_epi64x(INF_BITS as i64);
        let c1023 = _mm256_set1_epi64x(1023);
        let tiny = _mm256_set1_epi64x((self.emin - self.man as i32) as i64);
        let emin = _mm256_set1_epi64x(self.emin as i64);
        let dbase = _mm256_set1_epi64x(52 - self.man as i64);
        let c52 = _mm256_set1_epi64x(52);
        let c64 = _mm256_set1_epi64x(64);
        let imp = _mm256_set1_epi64x(1 << 52);
        let maxb = _mm256_set1_epi64x(self.max_bits as i64);
        let ovp = _mm256_castpd_si256(_mm256_set1_pd(self.ovf[0]));
        let ovn = _mm256_castpd_si256(_mm256_set1_pd(self.ovf[1]));
        let rsh = _mm256_set1_epi64x(64 - self.rbits as i64);
        let avv = _mm256_set1_pd(av);
        let mut j = 0;
        // SAFETY: j + 4 <= n for every vector access; all slices have length n.
        unsafe {
            while j + 4 <= n {
                let a = _mm256_loadu_pd(row.as_ptr().add(j));
                let p = _mm256_mul_pd(avv, _mm256_loadu_pd(bp.as_ptr().add(j)));
                let (sb, x) = sum_odd_x4(a, p);
                if M == M_TZ || M == M_UP || M == M_DN {
                    // Directed modes in hardware: scale x so the format's unit is 1
                    // (exact, a power of two), round to an integer, scale back.
                    let mag = _mm256_andnot_si256(sign, x);
                    let ex = _mm256_sub_epi64(_mm256_srli_epi64::<52>(mag), c1023);
                    let ee = _mm256_blendv_epi8(ex, emin, _mm256_cmpgt_epi64(emin, ex)); // max(ex, emin)
                    let qe = _mm256_sub_epi64(ee, _mm256_set1_epi64x(self.man as i64)); // log2 of the unit
                    let down = _mm256_castsi256_pd(_mm256_slli_epi64::<52>(_mm256_sub_epi64(c1023, qe)));
                    let upsc = _mm256_castsi256_pd(_mm256_slli_epi64::<52>(_mm256_add_epi64(c1023, qe)));
                    let y = _mm256_mul_pd(_mm256_castsi256_pd(x), down);
                    let y = match M {
                        M_TZ => _mm256_round_pd::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(y),
                        M_UP => _mm256_round_pd::<{ _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC }>(y),
                        _ => _mm256_round_pd::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(y),
                    };
                    let r = _mm256_castpd_si256(_mm256_mul_pd(y, upsc));
                    let ovf = _mm256_cmpgt_epi64(_mm256_andnot_si256(sign, r), maxb);
                    let neg = _mm256_cmpgt_epi64(zero, x);
                    let v = _mm256_blendv_epi8(r, _mm256_blendv_epi8(ovp, ovn, neg), ovf);
                    _mm256_storeu_pd(row.as_mut_ptr().add(j), _mm256_castsi256_pd(v));
                    let notfin = _mm256_cmpeq_epi64(_mm256_and_si256(sb, inf), inf);
                    let bm = _mm256_movemask_pd(_mm256_castsi256_pd(notfin));
                    if bm != 0 {
                        self.redo4(row, j, bm, std::mem::transmute::<__m256d, [f64; 4]>(a), av, bp, rands);
                    }
                    j += 4;
                    continue;
                }
                if M == M_NE {
                    // Nearest-even in hardware: adding and subtracting C = 1.5 * 2^52 * q,
                    // q the format's unit at x's binade (clamped at the subnormal unit),
                    // rounds x to a multiple of q with ties to even (C/q is even).
                    let mag = _mm256_andnot_si256(sign, x);
                    let ex = _mm256_sub_epi64(_mm256_srli_epi64::<52>(mag), c1023);
                    let ee = _mm256_blendv_epi8(ex, emin, _mm256_cmpgt_epi64(emin, ex)); // max(ex, emin)
                    let cb = _mm256_or_si256(
                        _mm256_slli_epi64::<52>(_mm256_add_epi64(ee, _mm256_set1_epi64x(52 + 1023 - self.man as i64))),
                        _mm256_set1_epi64x(1 << 51),
                    );
                    let cc = _mm256_castsi256_pd(cb);
                    let xd = _mm256_castsi256_pd(x);
                    let r = _mm256_castpd_si256(_mm256_sub_pd(_mm256_add_pd(xd, cc), cc));
                    // A negative x that rounds to zero gives +0 there: it keeps x's sign
                    // (r is never positive for a negative x).
                    let r = _mm256_or_si256(r, _mm256_and_si256(x, sign));
                    let ovf = _mm256_cmpgt_epi64(_mm256_andnot_si256(sign, r), maxb);
                    let neg = _mm256_cmpgt_epi64(zero, x);
                    let v = _mm256_blendv_epi8(r, _mm256_blendv_epi8(ovp, ovn, neg), ovf);
                    _mm256_storeu_pd(row.as_mut_ptr().add(j), _mm256_castsi256_pd(v));
                    let notfin = _mm256_cmpeq_epi64(_mm256_and_si256(sb, inf), inf);
                    let bm = _mm256_movemask_pd(_mm256_castsi256_pd(notfin));
                    if bm != 0 {
                        self.redo4(row, j, bm, std::mem::transmute::<__m256d, [f64; 4]>(a), av, bp, rands);
                    }
                    j += 4;
                    continue;
                }
                // Round x into the format.
                let mag = _mm256_andnot_si256(sign, x);
                let neg = _mm256_cmpgt_epi64(zero, x);
                let ex = _mm256_sub_epi64(_mm256_srli_epi64::<52>(mag), c1023);
                let isz = _mm256_cmpeq_epi64(mag, zero);
                let notfin = _mm256_cmpeq_epi64(_mm256_and_si256(sb, inf), inf);
                let bad = _mm256_or_si256(
                    _mm256_andnot_si256(isz, _mm256_or_si256(_mm256_cmpgt_epi64(mag, _mm256_sub_epi64(inf, one)), _mm256_cmpgt_epi64(tiny, ex))),
                    notfin,
                );
                let t = _mm256_sub_epi64(emin, ex);
                let t = _mm256_and_si256(t, _mm256_cmpgt_epi64(t, zero)); // max(t, 0)
                let d = _mm256_add_epi64(dbase, t);
                let d = _mm256_blendv_epi8(d, c52, _mm256_cmpgt_epi64(d, c52)); // min(d, 52)
                let unit = _mm256_sllv_epi64(one, d);
                let mask = _mm256_sub_epi64(unit, one);
                let rem = _mm256_and_si256(mag, mask);
                let trunc = _mm256_andnot_si256(mask, mag);
                let oddm = _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_srlv_epi64(_mm256_or_si256(mag, imp), d), one), one);
                let half = _mm256_sllv_epi64(one, _mm256_sub_epi64(d, one));
                let remnz = _mm256_xor_si256(_mm256_cmpeq_epi64(rem, zero), _mm256_set1_epi64x(-1));
                let up = match M {
                    M_NE => _mm256_or_si256(_mm256_cmpgt_epi64(rem, half), _mm256_and_si256(_mm256_cmpeq_epi64(rem, half), oddm)),
                    M_NA => _mm256_xor_si256(_mm256_cmpgt_epi64(half, rem), _mm256_set1_epi64x(-1)),
                    M_TZ => zero,
                    M_UP => _mm256_andnot_si256(neg, remnz),
                    M_DN => _mm256_and_si256(neg, remnz),
                    M_ODD => _mm256_andnot_si256(oddm, remnz),
                    _ => {
                        // rand < top rbits of the remainder, compared unsigned (sign flipped).
                        let thr = _mm256_srlv_epi64(_mm256_sllv_epi64(rem, _mm256_sub_epi64(c64, d)), rsh);
                        let rd = _mm256_loadu_si256(rands.as_ptr().add(j) as *const __m256i);
                        _mm256_cmpgt_epi64(_mm256_xor_si256(thr, sign), _mm256_xor_si256(rd, sign))
                    }
                };
                let r = _mm256_add_epi64(trunc, _mm256_and_si256(up, unit));
                let ovf = _mm256_cmpgt_epi64(r, maxb);
                let v = _mm256_or_si256(r, _mm256_and_si256(x, sign));
                let v = _mm256_blendv_epi8(v, _mm256_blendv_epi8(ovp, ovn, neg), ovf);
                let v = _mm256_blendv_epi8(v, x, isz);
                _mm256_storeu_pd(row.as_mut_ptr().add(j), _mm256_castsi256_pd(v));
                let bm = _mm256_movemask_pd(_mm256_castsi256_pd(bad));
                if bm != 0 {
                    self.redo4(row, j, bm, std::mem::transmute::<__m256d, [f64; 4]>(a), av, bp, rands);
                }
                j += 4;
            }
        }
        while j < n {
            row[j] = self.add(row[j], av * bp[j], rands[j]);
            j += 1;
        }
    }
}

impl<const M: u8> Fast<M> {
    /// Stochastic depth step on f64 lanes, element `j`'s random bits the top
    /// `rbits` (at most 32) of `u ^ vw[j]` ([`StepRand`]). The sum is
    /// rounded to odd at 53 bits (TwoSum), then rounding up happens exactly when
    /// `rem + (2^R - 1 - rand) * 2^(d-R) >= 2^d` (rem: the d bits below the
    /// format's unit): the same decision as `rand < top R bits of rem`, made by an
    /// integer add that carries into the unit, then a truncation.
    ///
    /// # Safety
    /// The CPU must support avx2; `rbits <= 32` and `52 - man >= rbits`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn step_st_avx2<const EXACT: bool>(&self, row: &mut [f64], bp: &[f64], av: f64, u: u64, vw: &[u64], rbits: u32) {
        use std::arch::x86_64::*;
        let n = row.len();
        let (bp, vw) = (&bp[..n], &vw[..n]);
        // SAFETY: vector accesses stay below n (j + 8 <= n); avx2 per the contract.
        unsafe {
            let sign = _mm256_set1_epi64x(SIGN as i64);
            let zero = _mm256_setzero_si256();
            let inf = _mm256_set1_epi64x(INF_BITS as i64);
            let eminb = _mm256_set1_epi64x(self.emin as i64 + 1023);
            let dbase = _mm256_set1_epi64x(52 - self.man as i64);
            let c52 = _mm256_set1_epi64x(52);
            let ones = _mm256_set1_epi64x(-1);
            let rmask = _mm256_set1_epi64x(((1u64 << rbits) - 1) as i64);
            let rb = _mm256_set1_epi64x(rbits as i64);
            let maxb = _mm256_set1_epi64x(self.max_bits as i64);
            let ovp = _mm256_castpd_si256(_mm256_set1_pd(self.ovf[0]));
            let ovn = _mm256_castpd_si256(_mm256_set1_pd(self.ovf[1]));
            let avv = _mm256_set1_pd(av);
            let rsh = _mm_cvtsi32_si128(64 - rbits as i32);
            let uv = _mm256_set1_epi64x(u as i64);
            let mut j = 0;
            while j + 8 <= n {
                let mut bm = 0;
                for h in 0..2 {
                    let jj = j + 4 * h;
                    let rd = _mm256_srl_epi64(_mm256_xor_si256(uv, _mm256_loadu_si256(vw.as_ptr().add(jj) as *const __m256i)), rsh);
                    let a = _mm256_loadu_pd(row.as_ptr().add(jj));
                    let p = _mm256_mul_pd(avv, _mm256_loadu_pd(bp.as_ptr().add(jj)));
                    let (sb, x) = if EXACT {
                        // The sum itself is exact.
                        let sb = _mm256_castpd_si256(_mm256_add_pd(a, p));
                        (sb, sb)
                    } else {
                        sum_odd_x4(a, p)
                    };
                    let mag = _mm256_andnot_si256(sign, x);
                    // d = bits below the unit: 52 - man, plus the distance below emin.
                    let t = _mm256_sub_epi64(eminb, _mm256_srli_epi64::<52>(mag));
                    let d = _mm256_add_epi64(dbase, _mm256_and_si256(t, _mm256_cmpgt_epi64(t, zero)));
                    // (2^R - 1 - rand) placed just below the unit, added with carry, then truncated.
                    let add = _mm256_sllv_epi64(_mm256_xor_si256(rd, rmask), _mm256_sub_epi64(d, rb));
                    let r = _mm256_and_si256(_mm256_add_epi64(mag, add), _mm256_sllv_epi64(ones, d));
                    let neg = _mm256_cmpgt_epi64(zero, x);
                    let v = _mm256_or_si256(r, _mm256_and_si256(x, sign));
                    let v = _mm256_blendv_epi8(v, _mm256_blendv_epi8(ovp, ovn, neg), _mm256_cmpgt_epi64(r, maxb));
                    _mm256_storeu_pd(row.as_mut_ptr().add(jj), _mm256_castsi256_pd(v));
                    // Redo exactly: inf/NaN sums, and nonzero values below the smallest
                    // subnormal's unit (d > 52, outside the significand field).
                    let notfin = _mm256_cmpeq_epi64(_mm256_and_si256(sb, inf), inf);
                    let tiny = _mm256_andnot_si256(_mm256_cmpeq_epi64(mag, zero), _mm256_cmpgt_epi64(d, c52));
                    let m = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_or_si256(notfin, tiny)));
                    if m != 0 {
                        let mut olds = [0f64; 4];
                        _mm256_storeu_pd(olds.as_mut_ptr(), a);
                        bm |= m << (4 * h);
                        // The old values are needed below; keep them in place of the results.
                        for (l, &o) in olds.iter().enumerate() {
                            if m & (1 << l) != 0 {
                                row[jj + l] = o;
                            }
                        }
                    }
                }
                if bm != 0 {
                    for l in 0..8 {
                        if bm & (1 << l) != 0 {
                            row[j + l] = self.add(row[j + l], av * bp[j + l], StepRand::top(u ^ vw[j + l], rbits));
                        }
                    }
                }
                j += 8;
            }
            while j < n {
                row[j] = self.add(row[j], av * bp[j], StepRand::top(u ^ vw[j], rbits));
                j += 1;
            }
        }
    }
}

/// Rows of the register tile of f64 accumulators ([`Fast::tile_avx2`]): 4
/// rows x 8 columns.
pub(crate) const TILE_ROWS: usize = 4;

/// The random words of a stochastic register tile ([`StepRand`]), placed
/// ([`Words::place_row`], [`Words::place_col`]): row r's at step kk
/// `rows[kk*TILE_ROWS + r]`, column l's `cols[kk*ldv + l]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Words<'a> {
    pub rows: &'a [u64],
    pub cols: &'a [u64],
    pub ldv: usize,
}

/// The placed words ([`Words::place_row`]) of rows `row0..row0 + nr` at steps
/// `t0..t0 + run.len()` from `words`, step kk of row `row0 + r` at
/// `dst[kk * TILE_ROWS + r]` (a tile's rows, laid out as A's values); `run`
/// is scratch.
#[allow(clippy::too_many_arguments)]
fn place_tile_rows(words: &StepRand, row0: usize, nr: usize, t0: usize, rbits: u32, d: u32, run: &mut [u64], dst: &mut [u64]) {
    for r in 0..nr {
        words.row_run(row0 + r, t0, rbits, run);
        for (kk, &w) in run.iter().enumerate() {
            dst[kk * TILE_ROWS + r] = Words::place_row(w, rbits, d);
        }
    }
}

/// The column words `ws` of step `kk` into panels laid out as [`drive`]'s
/// tile-major B panel (tile q's 8 words at `q*ts + kk*8`, the last tile's
/// partly): as drawn into `vpan`, and complemented and placed below the unit
/// (bit `d`) into `vpl` ([`Words::place_col`]), with AVX2 where `simd` (the
/// CPU has it).
#[allow(clippy::too_many_arguments)]
fn place_step_cols(simd: bool, ws: &[u64], kk: usize, ts: usize, rbits: u32, d: u32, vpan: &mut [u64], vpl: &mut [u64]) {
    #[inline(always)]
    fn body(ws: &[u64], kk: usize, ts: usize, rbits: u32, d: u32, vpan: &mut [u64], vpl: &mut [u64]) {
        let place = |ws: &[u64], dv: &mut [u64], dp: &mut [u64]| {
            for ((v, p), &w) in dv.iter_mut().zip(dp.iter_mut()).zip(ws) {
                (*v, *p) = (w, Words::place_col(w, rbits, d));
            }
        };
        let full = ws.len() / 8;
        for (q, w8) in ws.chunks_exact(8).enumerate() {
            let at = q * ts + kk * 8;
            let (dv, dp): (&mut [u64; 8], &mut [u64; 8]) = ((&mut vpan[at..at + 8]).try_into().expect("8"), (&mut vpl[at..at + 8]).try_into().expect("8"));
            place(w8, dv, dp);
        }
        let rest = &ws[full * 8..];
        if !rest.is_empty() {
            let at = full * ts + kk * 8;
            place(rest, &mut vpan[at..at + rest.len()], &mut vpl[at..at + rest.len()]);
        }
    }
    /// # Safety
    /// The CPU must support avx2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn body_avx2(ws: &[u64], kk: usize, ts: usize, rbits: u32, d: u32, vpan: &mut [u64], vpl: &mut [u64]) {
        body(ws, kk, ts, rbits, d, vpan, vpl)
    }
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` holds only where avx2 was detected.
        return unsafe { body_avx2(ws, kk, ts, rbits, d, vpan, vpl) };
    }
    let _ = simd;
    body(ws, kk, ts, rbits, d, vpan, vpl)
}

impl Words<'_> {
    /// No words (the deterministic modes).
    pub const NONE: Words<'static> = Words { rows: &[], cols: &[], ldv: 0 };

    /// A row's word placed for a format whose unit is bit `d` of the f64
    /// pattern: its top `rbits` bits moved to end just below the unit (those
    /// that fall below bit 0 dropped: float32's last 3 of 32, below the f64
    /// remainder's last bit). The xor of a placed row word and a placed column
    /// complement ([`Words::place_col`]) is `2^R - 1 - rand`, the top bits of
    /// `!(row ^ col)`, placed: shifts and masks commute with the xor.
    pub fn place_row(w: u64, rbits: u32, d: u32) -> u64 {
        (w & (u64::MAX << (64 - rbits.clamp(1, 64)))) >> (64 - d)
    }

    /// A column's word, complemented and placed as [`Words::place_row`].
    pub fn place_col(w: u64, rbits: u32, d: u32) -> u64 {
        Self::place_row(!w, rbits, d)
    }
}

impl<const M: u8> Fast<M> {
    /// Can the register tile round into this format? Any mode; stochastic with
    /// at most 32 random bits, shifted to land right below the unit of a normal
    /// value, `d = 52 - man` bits up the f64 pattern: left by `d - 32`, or
    /// right by `32 - d` (float32: the word's last 3 bits fall below the f64
    /// remainder's last bit and cannot change `rand < remainder`, as in
    /// [`Fast::round`]).
    fn tile_ok(&self, rbits: u32) -> bool {
        M != M_ST || rbits <= 32
    }

    /// Depth steps on a register tile of `NR` rows x 8 columns:
    /// `acc[r*ldc + l] = round(acc[r*ldc + l] + ap[kk*TILE_ROWS + r] * bp[kk*ldb + l])`
    /// for kk in `0..kn`. In the normal range the format's unit sits a fixed
    /// `d` bits up the f64 pattern, and every mode is an integer add below the
    /// unit (carrying into it) and a truncation: nearest-even adds half a unit
    /// minus one plus the unit bit, nearest-away half a unit, up or down a unit
    /// minus one for positive or negative values; odd truncates and sets the
    /// unit bit of inexact values. Stochastic adds the complement of the random
    /// bits just below the unit, as [`Fast::step_st_avx2`]: element (r, l)'s
    /// at step kk, `words.rows[kk*TILE_ROWS + r] ^ words.cols[kk*words.ldv +
    /// l]`, placed ([`Words::place_row`]). Only sums in the
    /// format's normal range (or zero) round here; if any other sum occurs
    /// (below the smallest normal, beyond the largest value, inf/NaN) the tile
    /// returns `false` and leaves `acc` untouched. Without `TRACK` the tile
    /// does not watch for them: the caller has shown ([`Fast::quiet_ok`]) that
    /// none can occur but subnormal sums on the format's grid, which the
    /// integer rounding leaves as they are (their bits below the unit are zero),
    /// as every mode must.
    ///
    /// # Safety
    /// The CPU must support avx2 and fma; `tile_ok(rbits)`; `EXACT` only when
    /// every `acc + a*b` is exact in f64; `TRACK` unless [`Fast::quiet_ok`] holds
    /// for the tile's values.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile_avx2<const NR: usize, const EXACT: bool, const TRACK: bool>(
        &self,
        acc: &mut [f64],
        ldc: usize,
        ap: &[f64],
        bp: &[f64],
        ldb: usize,
        kn: usize,
        words: Words,
        rbits: u32,
    ) -> bool {
        use std::arch::x86_64::*;
        assert!(NR <= TILE_ROWS && self.tile_ok(rbits) && self.man <= 50);
        assert!(acc.len() >= (NR - 1) * ldc + 8);
        if kn == 0 {
            return true;
        }
        assert!(ap.len() >= (kn - 1) * TILE_ROWS + NR && bp.len() >= (kn - 1) * ldb + 8);
        assert!(M != M_ST || (words.rows.len() >= (kn - 1) * TILE_ROWS + NR && words.cols.len() >= (kn - 1) * words.ldv + 8));
        let d = 52 - self.man;
        let lowb = ((self.emin + 1023) as u64) << 52;
        // SAFETY: every offset is inside the slices (asserted above); CPU features per the contract.
        unsafe {
            let absm = _mm256_set1_epi64x(!SIGN as i64);
            // Keeps the sign, the exponent and the bits down to the format's unit.
            let himask = _mm256_set1_epi64x(!((1u64 << d) - 1) as i64);
            let cnt_d = _mm_cvtsi32_si128(d as i32);
            let lowmask = _mm256_set1_epi64x(((1u64 << d) - 1) as i64);
            let half = _mm256_set1_epi64x((1u64 << (d - 1)) as i64);
            let unit = _mm256_set1_epi64x((1u64 << d) as i64);
            // mag + (2^63 - 1), read as an f64: NaN for mag = 0 (ignored by the
            // maximum below), else -(mag - 1) in bits, above -(lowb - 1) exactly
            // when 0 < mag < lowb.
            let shift0 = _mm256_set1_epi64x(i64::MAX);
            let one = _mm256_set1_epi64x(1);
            let zero = _mm256_setzero_si256();
            let mut c = [[_mm256_setzero_pd(); 2]; NR];
            for (r, cr) in c.iter_mut().enumerate() {
                cr[0] = _mm256_loadu_pd(acc.as_ptr().add(r * ldc));
                cr[1] = _mm256_loadu_pd(acc.as_ptr().add(r * ldc + 4));
            }
            let mut tiny = _mm256_set1_pd(f64::NEG_INFINITY);
            let mut big = _mm256_setzero_pd();
            let maxv = _mm256_set1_pd(f64::from_bits(self.max_bits));
            let (mut pa, mut pb) = (ap.as_ptr(), bp.as_ptr());
            for kk in 0..kn {
                let b = [_mm256_loadu_pd(pb), _mm256_loadu_pd(pb.add(4))];
                let vw = if M == M_ST {
                    let q = words.cols.as_ptr().add(kk * words.ldv) as *const __m256i;
                    [_mm256_loadu_si256(q), _mm256_loadu_si256(q.add(1))]
                } else {
                    [zero; 2]
                };
                for (r, cr) in c.iter_mut().enumerate() {
                    let av = _mm256_broadcast_sd(&*pa.add(r));
                    let comp = if M == M_ST {
                        // (2^R - 1 - rand) just below the unit: the placed row word
                        // xor the placed column complement.
                        let u = _mm256_set1_epi64x(*words.rows.get_unchecked(kk * TILE_ROWS + r) as i64);
                        [_mm256_xor_si256(u, vw[0]), _mm256_xor_si256(u, vw[1])]
                    } else {
                        [zero; 2]
                    };
                    for h in 0..2 {
                        let x = if EXACT {
                            _mm256_castpd_si256(_mm256_fmadd_pd(av, b[h], cr[h]))
                        } else {
                            sum_odd_x4(cr[h], _mm256_mul_pd(av, b[h])).1
                        };
                        // On the signed bit pattern: the add grows the magnitude and
                        // carries into the exponent; the mask truncates below the unit.
                        let add = match M {
                            M_ST => comp[h],
                            M_NE => _mm256_add_epi64(_mm256_sub_epi64(half, one), _mm256_and_si256(_mm256_srl_epi64(x, cnt_d), one)),
                            M_NA => half,
                            M_UP => _mm256_andnot_si256(_mm256_cmpgt_epi64(zero, x), lowmask),
                            M_DN => _mm256_and_si256(_mm256_cmpgt_epi64(zero, x), lowmask),
                            _ => zero,
                        };
                        let t = _mm256_and_si256(_mm256_add_epi64(x, add), himask);
                        let t = if M == M_ODD {
                            // Inexact: the unit bit set (the odd neighbour toward zero or away).
                            let exact = _mm256_cmpeq_epi64(_mm256_and_si256(x, lowmask), zero);
                            _mm256_or_si256(t, _mm256_andnot_si256(exact, unit))
                        } else {
                            t
                        };
                        cr[h] = _mm256_castsi256_pd(t);
                        if TRACK {
                            let mag = _mm256_and_si256(x, absm);
                            tiny = _mm256_max_pd(_mm256_castsi256_pd(_mm256_add_epi64(mag, shift0)), tiny);
                            // Beyond the largest value (so may the rounded magnitude be), inf or
                            // NaN: whose bit patterns the integer rounding does not respect.
                            big = _mm256_or_pd(big, _mm256_cmp_pd::<_CMP_NLE_UQ>(_mm256_castsi256_pd(mag), maxv));
                        }
                    }
                }
                pa = pa.add(TILE_ROWS);
                pb = pb.add(ldb);
            }
            let out = _mm256_or_pd(big, _mm256_cmp_pd::<_CMP_GT_OQ>(tiny, _mm256_castsi256_pd(_mm256_set1_epi64x((SIGN + lowb - 1) as i64))));
            if _mm256_movemask_pd(out) != 0 {
                return false;
            }
            for (r, cr) in c.iter().enumerate() {
                _mm256_storeu_pd(acc.as_mut_ptr().add(r * ldc), cr[0]);
                _mm256_storeu_pd(acc.as_mut_ptr().add(r * ldc + 4), cr[1]);
            }
            true
        }
    }

    /// Are all of a tile's sums exact in f64 (the FMA kernel, [`Fast::tile_avx2`]
    /// with `EXACT`), from its values? `acc`: [`exp_bounds64`] of its
    /// accumulators at the start (values of `man + 1` bits), `acc_max` their
    /// largest magnitude; `a`, `b`: those of its A and B values; `kn` steps.
    /// Every sum then spans at most 53 bits ([`block_exact`]): each accumulator
    /// stays below the bound of [`Fast::quiet_ok`], and a rounded sum is the
    /// exact sum or a multiple of a unit above its last bit, so no accumulator's
    /// last bit falls below those of the operands.
    fn exact_ok(&self, acc: Bounds64, acc_max: f64, a: Bounds64, b: Bounds64, kn: usize) -> bool {
        if a.1 || b.1 || acc.1 || !acc_max.is_finite() {
            return false;
        }
        // Zero products leave every sum exact.
        let (Some(a), Some(b)) = (a.0, b.0) else { return true };
        let growth = (1.0 + 2f64.powi(-(self.man as i32))).powi(kn as i32) * (1.0 + 1e-9);
        let bound = (acc_max + kn as f64 * 2f64.powi(a.1 + b.1)) * growth;
        let lo = acc.0.map_or(i32::MAX / 2, |x| x.0);
        block_exact((lo, bound.log2().floor() as i32 + 1), Some(a), Some(b))
    }

    /// Can a tile skip watching its sums ([`Fast::tile_avx2`] without `TRACK`)?
    /// `a`, `b`: [`exp_bounds64`] of its A and B values (never with an inf or
    /// NaN); `acc_max`: the largest accumulator magnitude at its start
    /// ([`abs_max`]); `kn` steps.
    /// Every product then lies on the format's grid (its last bit no lower than
    /// the format's smallest subnormal), so every sum of an accumulator value
    /// and a product does, and sums below the smallest normal are exact; and
    /// no sum can pass the largest value: each step adds at most `2^(ha+hb)`
    /// and its rounding grows the magnitude by at most one unit, a factor
    /// `1 + 2^-man`.
    fn quiet_ok(&self, a: Bounds64, b: Bounds64, acc_max: f64, kn: usize) -> bool {
        if a.1 || b.1 {
            return false;
        }
        let (grid, p) = match (a.0, b.0) {
            (Some(a), Some(b)) => (a.0 + b.0 >= self.emin - self.man as i32, 2f64.powi(a.1 + b.1)),
            _ => (true, 0.0),
        };
        let growth = (1.0 + 2f64.powi(-(self.man as i32))).powi(kn as i32) * (1.0 + 1e-9);
        // False for an inf or NaN accumulator, too.
        grid && (acc_max + kn as f64 * p) * growth <= f64::from_bits(self.max_bits)
    }

    /// [`Fast::tile_avx2`] for `nr` rows: `false` when the tile is not
    /// available or did not run (the caller then takes the step path).
    /// `words`, `track`: as [`Fast::tile_avx2`]'s.
    #[allow(clippy::too_many_arguments)]
    fn tile_run(&self, simd: bool, nr: usize, acc: &mut [f64], ldc: usize, ap: &[f64], bp: &[f64], ldb: usize, kn: usize, words: Words, rbits: u32, exact: bool, track: bool) -> bool {
        if !simd || !self.tile_ok(rbits) || nr == 0 || nr > TILE_ROWS {
            return false;
        }
        #[cfg(target_arch = "x86_64")]
        {
            macro_rules! go {
                ($nr:expr) => {
                    // SAFETY: `simd` is only true when avx2 and fma were detected; tile_ok holds.
                    unsafe {
                        match (exact, track) {
                            (true, true) => self.tile_avx2::<$nr, true, true>(acc, ldc, ap, bp, ldb, kn, words, rbits),
                            (true, false) => self.tile_avx2::<$nr, true, false>(acc, ldc, ap, bp, ldb, kn, words, rbits),
                            (false, true) => self.tile_avx2::<$nr, false, true>(acc, ldc, ap, bp, ldb, kn, words, rbits),
                            (false, false) => self.tile_avx2::<$nr, false, false>(acc, ldc, ap, bp, ldb, kn, words, rbits),
                        }
                    }
                };
            }
            match nr {
                1 => go!(1),
                2 => go!(2),
                3 => go!(3),
                _ => go!(TILE_ROWS),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (acc, ldc, ap, bp, ldb, kn, words, exact, track);
            false
        }
    }
}

impl<const M: u8> Fast<M> {
    /// The power of two that [`tile64_sr`] scales the values by, when it can
    /// round into this format with `rbits` random bits: stochastic, and at
    /// least one bit of the f64 significand below the random bits' last
    /// (`man + rbits <= 51`), so that the sum truncated toward zero keeps every
    /// bit the decision reads. The scale takes the format's smallest normal to
    /// f64's, and its subnormals to f64's.
    fn sr_scale(&self, rbits: u32) -> Option<i32> {
        if M == M_ST && rbits >= 1 && self.man + rbits <= 51 { self.f64_scale() } else { None }
    }

    /// [`Fast::sr_scale`], and with more bits (float32's default 32: 23 + 32 >
    /// 51) on the condition that the tile's f64 sums are all exact, `true`
    /// then: the remainder of an exact sum has at most `52 - man` bits, then
    /// zeros, so that its top bits against the word's top `52 - man` (the
    /// placed ones, [`Words::place_row`]) decide as all the bits do. The
    /// kernels report an inexact sum (MXCSR's precision flag).
    fn sr_checked(&self, rbits: u32) -> Option<(i32, bool)> {
        if M == M_ST && rbits >= 1 && self.man <= 50 { self.f64_scale().map(|s| (s, self.man + rbits > 51)) } else { None }
    }

    /// [`tile64_sr`] on a tile of `nr` rows x 8 columns of `acc` (row stride
    /// `ldc`): `aps` holds A's values scaled by 2^[`Fast::sr_scale`] (exactly),
    /// `bp` B's (row stride `ld`), `words` the placed words (column stride `ld`),
    /// `a` and `b` the bounds of the block's A and B values ([`exp_bounds64`]).
    /// The tile watches its sums unless a bound keeps them below the largest
    /// value; `false` (nothing written) if a sum passed it, or for an inf or NaN
    /// among the tile's values.
    #[allow(clippy::too_many_arguments)]
    fn tile_sr_run(&self, simd: bool, nr: usize, acc: &mut [f64], ldc: usize, aps: &[f64], bp: &[f64], ld: usize, kn: usize, words: Words, rbits: u32, a: Bounds64, b: Bounds64) -> bool {
        let Some((s, checked)) = self.sr_checked(rbits) else { return false };
        if !simd || nr == 0 || nr > TILE_ROWS || a.1 || b.1 {
            return false;
        }
        if kn == 0 {
            return true;
        }
        assert!(aps.len() >= kn * TILE_ROWS && words.rows.len() >= kn * TILE_ROWS && words.ldv == ld);
        assert!(acc.len() >= (nr - 1) * ldc + 8 && bp.len() >= (kn - 1) * ld + 8 && words.cols.len() >= (kn - 1) * ld + 8);
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (s, checked, acc, ldc, aps, bp, ld, words);
            false
        }
        #[cfg(target_arch = "x86_64")]
        {
            let (sc, back) = (pow2(s), pow2(-s));
            let mut t = Tile64([0.0; 32]);
            // SAFETY: `simd` is only true when avx2 was detected; acc holds the nr rows (asserted).
            let Some(amax) = (unsafe { tile64_in(&mut t, acc, ldc, nr, sc) }) else { return false };
            let max = f64::from_bits(self.max_bits);
            // (A rounding's growth 1 + e and a step's add, as in [`Fast::sr_watch`].)
            let (e, add) = (pow2(-(self.man as i32)), self.step_add(a, b));
            let track = self.sr_watch(amax, kn, a, b);
            // Past that bound: runs checked at their starts ([`tile64_sr_runs`]) where a
            // run's bound leaves room: the longest of 16, 8 or 4 steps whose sums stay
            // below the largest value from accumulators of at most `top` (twice the
            // tile's largest below it); the watching kernel from where a check fails.
            let runs = if track {
                // (1 + e)^4, ^8 and ^16 by squaring (their rounding is far inside the margin).
                let g4 = ((1.0 + e) * (1.0 + e)) * ((1.0 + e) * (1.0 + e));
                let g8 = g4 * g4;
                [(16usize, g8 * g8), (8, g8), (4, g4)].into_iter().find_map(|(run, g)| {
                    let growth = g * (1.0 + 1e-9);
                    let top = max / growth - run as f64 * add;
                    (top > 2.0 * amax).then_some((run, top * sc))
                })
            } else {
                None
            };
            // SAFETY: `simd` is only true when avx2 and fma were detected; the lengths are asserted above.
            let (mx, inexact) = unsafe {
                let d = 52 - self.man;
                let (done, ie) = match runs {
                    Some((run, top)) => {
                        let (r, ie) = tile64_sr_runs(&mut t, aps, bp, ld, words.rows, words.cols, kn / run, run, d, top);
                        (r * run, ie)
                    }
                    None => (0, false),
                };
                if done == kn {
                    (0.0, ie)
                } else {
                    // The steps left, from step `done`.
                    let (bp, cols, aps, rows) = (&bp[done * ld..], &words.cols[done * ld..], &aps[done * TILE_ROWS..], &words.rows[done * TILE_ROWS..]);
                    let (mx, ie2) = if track {
                        tile64_sr::<true>(&mut t, aps, bp, ld, rows, cols, kn - done, d)
                    } else {
                        tile64_sr::<false>(&mut t, aps, bp, ld, rows, cols, kn - done, d)
                    };
                    (mx, ie | ie2)
                }
            };
            // Past the largest value, or (checked) some sum not exact: void.
            if mx > max * sc || (checked && inexact) {
                return false;
            }
            // SAFETY: as for `tile64_in`.
            unsafe { tile64_out(&t, acc, ldc, nr, back) };
            true
        }
    }
}

impl<const M: u8> Fast<M> {
    /// The power of two that takes the format's smallest normal to f64's (and
    /// its subnormals to f64's): the scale of the f64 tiles that round at the
    /// unit bit of the pattern ([`tile64_sr`], [`tile64_ne`]).
    /// None where that power or its inverse is no normal f64 (a smallest normal
    /// above 1: a bias below 1).
    fn f64_scale(&self) -> Option<i32> {
        let s = -1022 - self.emin;
        (-1022..=1022).contains(&s).then_some(s)
    }

    /// The most a step can add to a magnitude, before its rounding grows it by
    /// a factor 1 + 2^-man in the normal range: the largest product of the
    /// block's values (`a`, `b`: their [`exp_bounds64`]) and the smallest
    /// subnormal (a rounding below the smallest normal).
    fn step_add(&self, a: Bounds64, b: Bounds64) -> f64 {
        let p = match (a.0, b.0) {
            (Some(a), Some(b)) => pow2(a.1 + b.1),
            _ => 0.0,
        };
        p + pow2(self.emin - self.man as i32)
    }

    /// Must the stochastic kernels ([`tile64_sr`], [`sr64_rows`]) watch their
    /// sums over `kn` steps from accumulators of magnitude at most `amax`
    /// (unscaled), with the block's values of bounds `a` and `b`? Not where a
    /// bound keeps every sum below the largest value: each rounding grows a
    /// magnitude by at most one unit, a factor 1 + e (e = 2^-man) in the normal
    /// range, the smallest subnormal below it, and (1 + e)^kn <= exp(kn e) <=
    /// 1 / (1 - kn e) while kn e < 1.
    fn sr_watch(&self, amax: f64, kn: usize, a: Bounds64, b: Bounds64) -> bool {
        let max = f64::from_bits(self.max_bits);
        let ke = kn as f64 * pow2(-(self.man as i32));
        ke >= 0.5 || (amax + kn as f64 * self.step_add(a, b)) * (1.0 + 1e-9) > max * (1.0 - ke)
    }

    /// The power of two that [`tile64_ne`] scales the values by, when it can
    /// round into this format: to nearest (even or away), the format's unit at
    /// least 2 bits up the f64 pattern. As [`Fast::sr_scale`]: the format's
    /// smallest normal becomes f64's, and its subnormals f64's.
    fn ne_scale(&self) -> Option<i32> {
        if (M == M_NE || M == M_NA) && self.man <= 50 { self.f64_scale() } else { None }
    }

    /// [`tile64_ne`] on a tile of `nr` rows x 8 columns of `acc` (row stride
    /// `ldc`), for sums that need not be exact in f64: `aps` holds A's values
    /// scaled by 2^[`Fast::ne_scale`] (exactly), `bp` B's (row stride `ld`), `a`
    /// and `b` the bounds of the block's A and B values ([`exp_bounds64`]).
    /// `false` (nothing written) where a bound does not keep every sum below the
    /// largest value, for an inf or NaN among the tile's values, or (nearest
    /// even) where some truncated sum lay exactly on a midpoint: the caller then
    /// takes the tile that rounds the f64 sums to odd.
    #[allow(clippy::too_many_arguments)]
    fn tile_ne_run(&self, simd: bool, nr: usize, acc: &mut [f64], ldc: usize, aps: &[f64], bp: &[f64], ld: usize, kn: usize, a: Bounds64, b: Bounds64) -> bool {
        let Some(s) = self.ne_scale() else { return false };
        if !simd || nr == 0 || nr > TILE_ROWS || a.1 || b.1 {
            return false;
        }
        if kn == 0 {
            return true;
        }
        assert!(aps.len() >= kn * TILE_ROWS && acc.len() >= (nr - 1) * ldc + 8 && bp.len() >= (kn - 1) * ld + 8);
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (s, acc, ldc, aps, bp, ld);
            false
        }
        #[cfg(target_arch = "x86_64")]
        {
            let (sc, back) = (pow2(s), pow2(-s));
            let mut t = Tile64([0.0; 32]);
            // SAFETY: `simd` is only true when avx2 was detected; acc holds the nr rows (asserted).
            let Some(amax) = (unsafe { tile64_in(&mut t, acc, ldc, nr, sc) }) else { return false };
            // No sum may pass the largest value (the integer rounding would carry
            // past it where the format rounds to infinity): each rounding grows a
            // magnitude by at most a unit in the normal range, a factor 1 + 2^-man,
            // and by the smallest subnormal below it. The steps run in segments as
            // long as that bound allows from the largest accumulator at their start.
            let (g, add, max) = (1.0 + pow2(-(self.man as i32)), self.step_add(a, b), f64::from_bits(self.max_bits));
            let fits = |amax: f64, len: usize| (amax + len as f64 * add) * g.powi(len as i32) * (1.0 + 1e-9) <= max;
            let (mut amax, mut done) = (amax, 0);
            while done < kn {
                let left = kn - done;
                let Some(len) = [left, 64, 16, 4].into_iter().filter(|&l| l <= left).find(|&l| fits(amax, l)) else { return false };
                // SAFETY: `simd` is only true when avx2 and fma were detected; steps
                // done..done+len lie inside aps and bp (asserted above).
                let tied = unsafe {
                    let (aps, bp) = (&aps[done * TILE_ROWS..], &bp[done * ld..]);
                    if M == M_NE {
                        tile64_ne::<true>(&mut t, aps, bp, ld, len, 52 - self.man)
                    } else {
                        tile64_ne::<false>(&mut t, aps, bp, ld, len, 52 - self.man)
                    }
                };
                if tied {
                    return false;
                }
                done += len;
                amax = t.0.iter().fold(0f64, |m, x| m.max(x.abs())) * back;
            }
            // SAFETY: as for `tile64_in`.
            unsafe { tile64_out(&t, acc, ldc, nr, back) };
            true
        }
    }
}

/// The `nr` rows of 8 values of `acc` (row stride `ldc`) into the rows of `t`
/// times `sc` (a power of two; zeros past row `nr`): the largest magnitude of
/// the values, `None` when one is inf or NaN.
///
/// # Safety
/// The CPU must support avx2; `acc` holds `(nr - 1) * ldc + 8` values, `nr <= 4`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tile64_in(t: &mut Tile64, acc: &[f64], ldc: usize, nr: usize, sc: f64) -> Option<f64> {
    use std::arch::x86_64::*;
    assert!(nr <= TILE_ROWS && (nr == 0 || acc.len() >= (nr - 1) * ldc + 8));
    // SAFETY: loads of rows r < nr, 8 values each, inside acc (asserted); stores inside t.
    unsafe {
        let (scv, mag, inf) = (_mm256_set1_pd(sc), _mm256_castsi256_pd(_mm256_set1_epi64x(i64::MAX)), _mm256_set1_pd(f64::INFINITY));
        let (mut mx, mut fin) = (_mm256_setzero_pd(), _mm256_castsi256_pd(_mm256_set1_epi64x(-1)));
        for r in 0..nr {
            for h in 0..2 {
                let v = _mm256_loadu_pd(acc.as_ptr().add(r * ldc + 4 * h));
                let a = _mm256_and_pd(v, mag);
                mx = _mm256_max_pd(mx, a);
                // Below inf: finite (a NaN compares false).
                fin = _mm256_and_pd(fin, _mm256_cmp_pd::<_CMP_LT_OQ>(a, inf));
                _mm256_store_pd(t.0.as_mut_ptr().add(r * 8 + 4 * h), _mm256_mul_pd(v, scv));
            }
        }
        if _mm256_movemask_pd(fin) != 0xf {
            return None;
        }
        let m2 = _mm_max_pd(_mm256_castpd256_pd128(mx), _mm256_extractf128_pd::<1>(mx));
        Some(_mm_cvtsd_f64(_mm_max_pd(m2, _mm_unpackhi_pd(m2, m2))))
    }
}

/// The first `nr` rows of `t` times `back` into the rows of 8 values of `acc`
/// (row stride `ldc`).
///
/// # Safety
/// As [`tile64_in`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tile64_out(t: &Tile64, acc: &mut [f64], ldc: usize, nr: usize, back: f64) {
    use std::arch::x86_64::*;
    assert!(nr <= TILE_ROWS && (nr == 0 || acc.len() >= (nr - 1) * ldc + 8));
    // SAFETY: stores of rows r < nr, 8 values each, inside acc (asserted); loads inside t.
    unsafe {
        let b = _mm256_set1_pd(back);
        for r in 0..nr {
            for h in 0..2 {
                _mm256_storeu_pd(acc.as_mut_ptr().add(r * ldc + 4 * h), _mm256_mul_pd(_mm256_load_pd(t.0.as_ptr().add(r * 8 + 4 * h)), b));
            }
        }
    }
}

/// MXCSR entry of the kernels that round in a mode of their own: saves MXCSR at `[{csr}]` and
/// loads it with rounding control `{rc}` (bits 13-14), flush-to-zero and
/// denormals-are-zero off and the exception flags (bits 0-5) clear (`[{csr} +
/// 4]` is scratch; `tile_asm!` leaves the kernel's MXCSR there, its flags those
/// the kernel raised).
#[cfg(target_arch = "x86_64")]
macro_rules! mxcsr_enter {
    () => {
        concat!(
            "vstmxcsr dword ptr [{csr}]\n",
            "mov {t:e}, dword ptr [{csr}]\n",
            "and {t:e}, 0xFFFF1F80\n",
            "or {t:e}, {rc:e}\n",
            "mov dword ptr [{csr} + 4], {t:e}\n",
            "vldmxcsr dword ptr [{csr} + 4]\n",
        )
    };
}

/// MXCSR's precision flag: some result was inexact.
const MXCSR_PE: u32 = 1 << 5;

/// 2^e, from its bit pattern (subnormal below 2^-1022, 0 below 2^-1074,
/// infinity above 2^1023). No call: `powi`, which the compiler would
/// speculate on both sides of a branch, costs a call where it runs per tile.
#[inline]
fn pow2(e: i32) -> f64 {
    if e > 1023 {
        f64::INFINITY
    } else if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else if e >= -1074 {
        f64::from_bits(1u64 << (e + 1074))
    } else {
        0.0
    }
}

/// A register tile of f64 accumulators in memory: 4 rows x 8 columns.
#[repr(C, align(32))]
struct Tile64([f64; 32]);

/// The instructions of the stochastic kernels for f32 ([`tile16_sr`]) or f64
/// ([`tile64_sr`]) lanes.
#[cfg(target_arch = "x86_64")]
macro_rules! sr_elem {
    (f32, bcast) => { "vbroadcastss" };
    (f32, ptr) => { "dword ptr" };
    (f32, fma) => { "vfmadd231ps" };
    (f32, add) => { "vpaddd" };
    (f64, bcast) => { "vbroadcastsd" };
    (f64, ptr) => { "qword ptr" };
    (f64, fma) => { "vfmadd231pd" };
    (f64, add) => { "vpaddq" };
}

/// One accumulator of a stochastic kernel's step on `$e` lanes: `$c += a * $b`
/// by the FMA toward zero, plus the random complement (ymm11, the row's word
/// from A's side, xor `$v`, the column's from B's side), the bits below the
/// unit cleared (ymm15). ymm10 holds `a`; ymm14 scratch.
#[cfg(target_arch = "x86_64")]
macro_rules! sr_acc {
    ($e:ident, $c:literal, $b:literal, $v:expr) => {
        concat!(sr_sum!($e, $c, $b, $v), "vpand ", $c, ", ", $c, ", ymm15\n")
    };
}
/// [`sr_acc`] up to the clearing of the bits below the unit: the FMA toward
/// zero and the add of the random complement.
#[cfg(target_arch = "x86_64")]
macro_rules! sr_sum {
    ($e:ident, $c:literal, $b:literal, $v:expr) => {
        concat!(
            "vpxor ymm14, ymm11, ", $v, "\n",
            sr_elem!($e, fma), " ", $c, ", ymm10, ", $b, "\n",
            sr_elem!($e, add), " ", $c, ", ", $c, ", ymm14\n",
        )
    };
}

/// One row of a stochastic kernel's step on `$e` lanes: `a` and the row's
/// random word broadcast (ymm10, ymm11), then both accumulators' adds (`sr_acc_of!`).
#[cfg(target_arch = "x86_64")]
macro_rules! sr_row_of {
    ($e:ident, $r:ident, $off:literal, $c0:literal, $c1:literal) => {
        concat!(
            sr_elem!($e, bcast), " ymm10, ", sr_elem!($e, ptr), " [{pa} + ", $off, "]\n",
            sr_elem!($e, bcast), " ymm11, ", sr_elem!($e, ptr), " [{pu} + ", $off, "]\n",
            sr_acc_of!($e, $r, $c0, "ymm8", "ymm12", "0"),
            sr_acc_of!($e, $r, $c1, "ymm9", "ymm13", "32"),
        )
    };
}

/// [`sr_row_of`] for f32 lanes, as `tile_asm!` calls its rows.
#[cfg(target_arch = "x86_64")]
macro_rules! sr_row {
    ($r:ident, $off:literal, $c0:literal, $o0:literal, $c1:literal, $o1:literal) => {
        sr_row_of!(f32, $r, $off, $c0, $c1)
    };
}

/// [`sr_row_of`]'s add of one accumulator: `plain`, [`sr_acc`] with its
/// column words in register `$vr` (the step's words in ymm12, ymm13); `track`,
/// with them at byte `$vo` of the step's words, then the largest magnitude so
/// far kept in ymm12 (ymm13: the magnitude mask): of the f32 patterns by an
/// unsigned maximum, of the f64 values by `vmaxpd` (no NaN arises); `ties`
/// (f32), with them there too, and the lanes whose bits below the unit are all
/// ones after the add of the word (ymm13: their mask) joined into ymm12.
#[cfg(target_arch = "x86_64")]
macro_rules! sr_acc_of {
    ($e:ident, plain, $c:literal, $b:literal, $vr:literal, $vo:literal) => {
        sr_acc!($e, $c, $b, $vr)
    };
    (f32, track, $c:literal, $b:literal, $vr:literal, $vo:literal) => {
        concat!(
            sr_acc!(f32, $c, $b, concat!("ymmword ptr [{pv} + ", $vo, "]")),
            "vpand ymm14, ", $c, ", ymm13\n",
            "vpmaxud ymm12, ymm12, ymm14\n",
        )
    };
    (f32, ties, $c:literal, $b:literal, $vr:literal, $vo:literal) => {
        concat!(
            sr_sum!(f32, $c, $b, concat!("ymmword ptr [{pv} + ", $vo, "]")),
            "vpand ymm14, ", $c, ", ymm13\n",
            "vpcmpeqd ymm14, ymm14, ymm13\n",
            "vpor ymm12, ymm12, ymm14\n",
            "vpand ", $c, ", ", $c, ", ymm15\n",
        )
    };
    (f64, track, $c:literal, $b:literal, $vr:literal, $vo:literal) => {
        concat!(
            sr_acc!(f64, $c, $b, concat!("ymmword ptr [{pv} + ", $vo, "]")),
            "vandpd ymm14, ", $c, ", ymm13\n",
            "vmaxpd ymm12, ymm12, ymm14\n",
        )
    };
}

/// The 8 accumulators of a [`Tile64`] at `{c}` into ymm0-ymm7.
#[cfg(target_arch = "x86_64")]
macro_rules! tile64_load {
    () => {
        concat!(
            "vmovupd ymm0, ymmword ptr [{c}]\n",
            "vmovupd ymm1, ymmword ptr [{c} + 32]\n",
            "vmovupd ymm2, ymmword ptr [{c} + 64]\n",
            "vmovupd ymm3, ymmword ptr [{c} + 96]\n",
            "vmovupd ymm4, ymmword ptr [{c} + 128]\n",
            "vmovupd ymm5, ymmword ptr [{c} + 160]\n",
            "vmovupd ymm6, ymmword ptr [{c} + 192]\n",
            "vmovupd ymm7, ymmword ptr [{c} + 224]\n",
        )
    };
}

/// ymm0-ymm7 back into the [`Tile64`] at `{c}`.
#[cfg(target_arch = "x86_64")]
macro_rules! tile64_store {
    () => {
        concat!(
            "vmovupd ymmword ptr [{c}], ymm0\n",
            "vmovupd ymmword ptr [{c} + 32], ymm1\n",
            "vmovupd ymmword ptr [{c} + 64], ymm2\n",
            "vmovupd ymmword ptr [{c} + 96], ymm3\n",
            "vmovupd ymmword ptr [{c} + 128], ymm4\n",
            "vmovupd ymmword ptr [{c} + 160], ymm5\n",
            "vmovupd ymmword ptr [{c} + 192], ymm6\n",
            "vmovupd ymmword ptr [{c} + 224], ymm7\n",
        )
    };
}

/// The assembly block of a [`Tile64`] kernel: MXCSR entered (rounding control
/// `{rc}`), `setup`, the 8 accumulators loaded, `pre`, then `{kn}` steps (B's 8
/// values in ymm8, ymm9, then `bx`, the 4 `rows`, A's pointer moved 4 values and
/// B's `{ld}` bytes, then `step`), `post`, the accumulators stored, `fin`, the
/// kernel's MXCSR stored at `[{csr} + 4]` (its flags) and MXCSR restored.
/// Operands `c`, `pa`, `pb`, `ld` (the row stride in bytes), `kn`, `csr`,
/// `rc`, `t`, `k` (the constants), then the caller's; every vector register
/// is declared clobbered.
#[cfg(target_arch = "x86_64")]
macro_rules! tile64_asm {
    (setup: [$($setup:expr),*], bx: [$($bx:expr),*], rows: [$($row:expr),*], step: [$($step:expr),*], pre: [$($pre:expr),*],
     post: [$($post:expr),*], fin: [$($fin:expr),*], io: ($acc:expr, $ap:expr, $bp:expr, $ld:expr, $kn:expr, $csr:expr, $rc:expr, $k:expr), $($ops:tt)*) => {
        asm!(
            mxcsr_enter!(),
            $($setup,)*
            tile64_load!(),
            $($pre,)*
            "2:",
            "vmovupd ymm8, ymmword ptr [{pb}]",
            "vmovupd ymm9, ymmword ptr [{pb} + 32]",
            $($bx,)*
            $($row,)*
            "add {pa}, 32",
            "add {pb}, {ld}",
            $($step,)*
            "dec {kn}",
            "jnz 2b",
            $($post,)*
            tile64_store!(),
            $($fin,)*
            "vstmxcsr dword ptr [{csr} + 4]",
            "vldmxcsr dword ptr [{csr}]",
            c = in(reg) $acc.0.as_mut_ptr(),
            pa = inout(reg) $ap.as_ptr() => _,
            pb = inout(reg) $bp.as_ptr() => _,
            ld = in(reg) $ld * 8,
            kn = inout(reg) $kn => _,
            csr = in(reg) $csr.as_mut_ptr(),
            rc = in(reg) $rc,
            t = out(reg) _,
            k = in(reg) $k.as_mut_ptr(),
            $($ops)*
            out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
            out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
            out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
            out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
            options(nostack),
        )
    };
}

/// The assembly block of [`tile64_sr`] and [`tile64_sr_runs`] ([`tile64_asm`]
/// toward zero): the unit mask in ymm15 before `setup`, the rows [`sr_row_of`]
/// `$t`, the row words at `{pu}` (4 a step) and the column words at `{pv}`
/// (the row stride `{ld}`) beside A and B.
#[cfg(target_arch = "x86_64")]
macro_rules! sr64_asm {
    ($t:ident, setup: [$($setup:expr),*], bx: [$($bx:expr),*], pre: [$($pre:expr),*], post: [$($post:expr),*], fin: [$($fin:expr),*],
     io: ($acc:expr, $ap:expr, $bp:expr, $up:expr, $vp:expr, $ld:expr, $kn:expr, $csr:expr, $rc:expr, $k:expr), $($ops:tt)*) => {
        tile64_asm!(
            setup: ["vpbroadcastq ymm15, qword ptr [{k}]" $(, $setup)*],
            bx: [$($bx),*],
            rows: [
                sr_row_of!(f64, $t, "0", "ymm0", "ymm1"),
                sr_row_of!(f64, $t, "8", "ymm2", "ymm3"),
                sr_row_of!(f64, $t, "16", "ymm4", "ymm5"),
                sr_row_of!(f64, $t, "24", "ymm6", "ymm7")
            ],
            step: ["add {pu}, 32", "add {pv}, {ld}"],
            pre: [$($pre),*],
            post: [$($post),*],
            fin: [$($fin),*],
            io: ($acc, $ap, $bp, $ld, $kn, $csr, $rc, $k),
            pu = inout(reg) $up.as_ptr() => _,
            pv = inout(reg) $vp.as_ptr() => _,
            $($ops)*
        )
    };
}

/// The stochastic register tile of f64 accumulators, 4 rows x 8 columns, on
/// values scaled by 2^[`Fast::sr_scale`]: `kn` steps of
/// `acc[r*8 + l] = SR(acc[r*8 + l] + ap[kk*4 + r] * bp[kk*ld + l])`, where the
/// format's unit is bit `d` (= 52 - man) of every pattern: the sum is the FMA
/// toward zero (MXCSR, inside the assembly block), then `2^R - 1 - rand`
/// placed just below the unit, `up[kk*4 + r] ^ vp[kk*ld + l]` (the row's
/// placed word and the column's placed complement, [`StepRand`]), is added to
/// the pattern, carrying into the unit exactly when `rand` is below the top R
/// bits of the remainder, and the bits below the unit are cleared. Four
/// vector operations an add of 4 lanes.
///
/// Toward zero, the f64 sum keeps every bit of the exact sum down to 2^(d-R-1)
/// below the unit or further: its truncated remainder has the exact one's top
/// R bits, which the path's rounding of the sum rounded to odd ([`Fast::round`])
/// reads too. On the scaled values the format's smallest normal is f64's, so a
/// sum in the format's subnormal range is an f64 subnormal, truncated by the
/// FMA at 2^-1074, whose unit bit is bit `d` of the pattern as well: the same
/// add and truncation round it at its fixed unit. The carry grows the
/// magnitude of the signed pattern; an exact zero sum is +0 toward zero, as
/// the path's TwoSum gives, and stays zero.
///
/// With `TRACK` the kernel returns the largest magnitude of any rounded sum
/// (0 without), which the caller compares with the scaled largest value: past
/// it the tile's result is void. Six operations an add. It returns too
/// whether some FMA was inexact (MXCSR's precision flag), which voids the
/// tile where the decision reads more bits than the f64 sum keeps below the
/// unit ([`Fast::sr_checked`]).
///
/// # Safety
/// The CPU must support avx2 and fma; `ap` and `up` hold kn*4 values, `bp` and
/// `vp` (kn-1)*ld + 8; `d` is 2 to 52; the values are finite.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile64_sr<const TRACK: bool>(acc: &mut Tile64, ap: &[f64], bp: &[f64], ld: usize, up: &[u64], vp: &[u64], kn: usize, d: u32) -> (f64, bool) {
    use std::arch::asm;
    assert!(kn >= 1 && ap.len() >= kn * TILE_ROWS && up.len() >= kn * TILE_ROWS);
    assert!(bp.len() >= (kn - 1) * ld + 8 && vp.len() >= (kn - 1) * ld + 8);
    assert!((2..=52).contains(&d));
    // The mask that truncates at the unit, the magnitude bits, then the largest
    // magnitude's 4 lanes.
    let mut k: [u64; 6] = [!((1u64 << d) - 1), !SIGN, 0, 0, 0, 0];
    // Toward zero.
    let rc = 3u32 << 13;
    let mut csr = [0u32; 2];
    // SAFETY: the loads and stores stay inside acc (32 values), ap and up
    // (kn*4), bp and vp ((kn-1)*ld + 8) and k; MXCSR is restored before the
    // block ends; the clobbered vector registers are declared.
    unsafe {
        if TRACK {
            sr64_asm!(track, setup: ["vpbroadcastq ymm13, qword ptr [{k} + 8]", "vpxor ymm12, ymm12, ymm12"], bx: [], pre: [], post: [],
                fin: ["vmovdqu ymmword ptr [{k} + 16], ymm12"], io: (acc, ap, bp, up, vp, ld, kn, csr, rc, k),);
        } else {
            sr64_asm!(plain, setup: [], bx: ["vmovdqu ymm12, ymmword ptr [{pv}]", "vmovdqu ymm13, ymmword ptr [{pv} + 32]"], pre: [], post: [],
                fin: [], io: (acc, ap, bp, up, vp, ld, kn, csr, rc, k),);
        }
    }
    (k[2..].iter().fold(0f64, |m, &x| m.max(f64::from_bits(x))), csr[1] & MXCSR_PE != 0)
}

/// [`tile64_sr`] (not watching) in runs of `run` steps, checked before each
/// run: `runs` runs while the largest accumulator magnitude stays at most
/// `top` (the caller's bound, scaled: from there no sum of a run can pass the
/// largest value). Returns the runs done (the tile holds their sums) and
/// whether some FMA was inexact, as [`tile64_sr`]. A check
/// costs about 21 operations a run, where watching every sum costs 16 a step.
///
/// # Safety
/// As [`tile64_sr`]'s, with kn = runs * run.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile64_sr_runs(acc: &mut Tile64, ap: &[f64], bp: &[f64], ld: usize, up: &[u64], vp: &[u64], runs: usize, run: usize, d: u32, top: f64) -> (usize, bool) {
    use std::arch::asm;
    let kn = runs * run;
    assert!(run >= 1 && ap.len() >= kn * TILE_ROWS && up.len() >= kn * TILE_ROWS && top.is_finite());
    assert!(kn == 0 || (bp.len() >= (kn - 1) * ld + 8 && vp.len() >= (kn - 1) * ld + 8));
    assert!((2..=52).contains(&d));
    if runs == 0 {
        return (0, false);
    }
    // The mask that truncates at the unit, the magnitude bits, the bound.
    let mut k: [u64; 3] = [!((1u64 << d) - 1), !SIGN, top.to_bits()];
    let rc = 3u32 << 13;
    let mut csr = [0u32; 2];
    let left: usize;
    // SAFETY: the loads and stores stay inside acc (32 values), ap and up
    // (kn*4), bp and vp ((kn-1)*ld + 8) and k; MXCSR is restored before the
    // block ends; the clobbered vector registers are declared.
    unsafe {
        sr64_asm!(plain, setup: [], bx: ["vmovdqu ymm12, ymmword ptr [{pv}]", "vmovdqu ymm13, ymmword ptr [{pv} + 32]"],
            pre: [
                "3:",
                // The largest magnitude against the bound (the sums are finite: no NaN).
                "vpbroadcastq ymm8, qword ptr [{k} + 8]",
                "vandpd ymm10, ymm0, ymm8",
                "vandpd ymm11, ymm1, ymm8",
                "vmaxpd ymm10, ymm10, ymm11",
                "vandpd ymm11, ymm2, ymm8",
                "vmaxpd ymm10, ymm10, ymm11",
                "vandpd ymm11, ymm3, ymm8",
                "vmaxpd ymm10, ymm10, ymm11",
                "vandpd ymm11, ymm4, ymm8",
                "vmaxpd ymm10, ymm10, ymm11",
                "vandpd ymm11, ymm5, ymm8",
                "vmaxpd ymm10, ymm10, ymm11",
                "vandpd ymm11, ymm6, ymm8",
                "vmaxpd ymm10, ymm10, ymm11",
                "vandpd ymm11, ymm7, ymm8",
                "vmaxpd ymm10, ymm10, ymm11",
                "vbroadcastsd ymm9, qword ptr [{k} + 16]",
                "vcmppd ymm10, ymm10, ymm9, 30",
                "vptest ymm10, ymm10",
                "jnz 9f",
                "mov {kn}, {run}"
            ],
            post: ["dec {runs}", "jnz 3b", "9:"],
            fin: [],
            io: (acc, ap, bp, up, vp, ld, run, csr, rc, k),
            run = in(reg) run,
            runs = inout(reg) runs => left,
        );
    }
    (runs - left, csr[1] & MXCSR_PE != 0)
}

/// One accumulator of a [`tile64_ne`] step: `$c += a * $b` (ymm10: a) toward
/// zero, then half a unit (ymm14) added to the pattern and the bits below the
/// unit cleared (ymm15); nearest-even also marks (in ymm12) the lanes whose
/// bits below the unit were then zero, that is, exactly half a unit before
/// (ymm13: the mask of those bits; `[{k} + 24]`: zeros).
#[cfg(target_arch = "x86_64")]
macro_rules! ne64_acc {
    (na, $c:literal, $b:literal) => {
        concat!(
            "vfmadd231pd ", $c, ", ymm10, ", $b, "\n",
            "vpaddq ", $c, ", ", $c, ", ymm14\n",
            "vpand ", $c, ", ", $c, ", ymm15\n",
        )
    };
    (ne, $c:literal, $b:literal) => {
        concat!(
            "vfmadd231pd ", $c, ", ymm10, ", $b, "\n",
            "vpaddq ", $c, ", ", $c, ", ymm14\n",
            "vpand ymm11, ", $c, ", ymm13\n",
            "vpcmpeqq ymm11, ymm11, ymmword ptr [{k} + 24]\n",
            "vpor ymm12, ymm12, ymm11\n",
            "vpand ", $c, ", ", $c, ", ymm15\n",
        )
    };
}

/// One row of a [`tile64_ne`] step: A's value at byte `$off` of the step's 4, broadcast.
#[cfg(target_arch = "x86_64")]
macro_rules! ne64_row {
    ($t:ident, $off:literal, $c0:literal, $c1:literal) => {
        concat!(
            "vbroadcastsd ymm10, qword ptr [{pa} + ", $off, "]\n",
            ne64_acc!($t, $c0, "ymm8"),
            ne64_acc!($t, $c1, "ymm9"),
        )
    };
}

/// The assembly block of [`tile64_ne`] with rounding `$t` ([`ne64_acc`]):
/// [`tile64_asm`] toward zero, its marks' lanes stored at `[{k} + 56]`.
#[cfg(target_arch = "x86_64")]
macro_rules! ne64_asm {
    ($t:ident, $acc:expr, $ap:expr, $bp:expr, $ld:expr, $kn:expr, $csr:expr, $rc:expr, $k:expr) => {
        tile64_asm!(
            setup: [
                "vpbroadcastq ymm15, qword ptr [{k}]",
                "vpbroadcastq ymm13, qword ptr [{k} + 8]",
                "vpbroadcastq ymm14, qword ptr [{k} + 16]",
                "vpxor ymm12, ymm12, ymm12"
            ],
            bx: [],
            rows: [
                ne64_row!($t, "0", "ymm0", "ymm1"),
                ne64_row!($t, "8", "ymm2", "ymm3"),
                ne64_row!($t, "16", "ymm4", "ymm5"),
                ne64_row!($t, "24", "ymm6", "ymm7")
            ],
            step: [],
            pre: [],
            post: [],
            fin: ["vmovdqu ymmword ptr [{k} + 56], ymm12"],
            io: ($acc, $ap, $bp, $ld, $kn, $csr, $rc, $k),
        )
    };
}

/// The register tile of f64 accumulators to nearest, even (`NE`) or away,
/// 4 rows x 8 columns, on values scaled by 2^[`Fast::ne_scale`]: `kn` steps
/// of `acc[r*8 + l] = RN(acc[r*8 + l] + ap[kk*4 + r] * bp[kk*ld + l])`, where
/// the format's unit is bit `d` (= 52 - man) of every pattern. The sum is the
/// FMA toward zero (MXCSR, inside the assembly block), `y`, the exact sum `x`
/// truncated at f64's last bit (or at 2^-1074: on the scaled values the
/// format's subnormals are f64's, with their unit at bit `d` too). Every
/// midpoint of the format lies on that grid, so the truncation never passes
/// one: `x` is at or above a midpoint exactly when `y` is, and rounding `y`
/// half away from zero (half a unit added to the pattern, which carries into
/// the unit, then the bits below it cleared) is rounding `x` half away from
/// zero. Nearest-away is that; nearest-even differs from it only where `x`
/// itself is a midpoint, so where `y` is one too: the kernel returns whether
/// some `y` was (the caller then takes another tile), else the tile holds the
/// nearest-even sums. Six vector operations an add of 4 lanes (away: three).
/// An exact zero sum is +0 toward zero, as to nearest.
///
/// # Safety
/// The CPU must support avx2 and fma; `ap` holds kn*4 values, `bp`
/// (kn-1)*ld + 8; `d` is 2 to 52; the values are finite and no sum passes
/// the format's largest value.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile64_ne<const NE: bool>(acc: &mut Tile64, ap: &[f64], bp: &[f64], ld: usize, kn: usize, d: u32) -> bool {
    use std::arch::asm;
    assert!(kn >= 1 && ap.len() >= kn * TILE_ROWS && bp.len() >= (kn - 1) * ld + 8);
    assert!((2..=52).contains(&d));
    // The mask that truncates at the unit, the bits below it, half a unit,
    // zeros (4), then the marks' 4 lanes.
    let mut k: [u64; 11] = [!((1u64 << d) - 1), (1u64 << d) - 1, 1u64 << (d - 1), 0, 0, 0, 0, 0, 0, 0, 0];
    // Toward zero.
    let rc = 3u32 << 13;
    let mut csr = [0u32; 2];
    // SAFETY: the loads and stores stay inside acc (32 values), ap (kn*4), bp
    // ((kn-1)*ld + 8) and k; MXCSR is restored before the block ends; the
    // clobbered vector registers are declared.
    unsafe {
        if NE {
            ne64_asm!(ne, acc, ap, bp, ld, kn, csr, rc, k);
        } else {
            ne64_asm!(na, acc, ap, bp, ld, kn, csr, rc, k);
        }
    }
    k[7..].iter().any(|&x| x != 0)
}

/// Chunk totals into a format of [`Fast::sr_scale`], stochastic, on f64 lanes:
/// `out[l] = SR(tot[l] + sums[l])` as [`tile64_sr`]'s add with a = 1, the
/// random complement `w[l]` placed below the unit (bit `d`, [`Words::place_col`]):
/// both values scaled by `sc` (exactly, per the caller), added toward zero,
/// the word added to the pattern, the bits below the unit cleared, and the
/// result scaled back by `back`. Returns the largest magnitude of a scaled
/// result, infinity where one is not finite.
///
/// # Safety
/// The CPU must support avx2 and fma; `out`'s length is a multiple of 4, and
/// `tot`, `sums` and `w` are at least as long; `d` is 2 to 52.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn flush64_sr(out: &mut [f64], tot: &[f64], sums: &[f64], w: &[u64], sc: f64, back: f64, d: u32) -> f64 {
    use std::arch::asm;
    let n = out.len() / 4;
    assert!(out.len().is_multiple_of(4) && tot.len() >= out.len() && sums.len() >= out.len() && w.len() >= out.len() && (2..=52).contains(&d));
    if n == 0 {
        return 0.0;
    }
    // The scales, the mask that truncates at the unit, the magnitude bits,
    // infinity, then the largest magnitude's 4 lanes and the non-finite flags'.
    let mut k: [u64; 13] = [sc.to_bits(), back.to_bits(), !((1u64 << d) - 1), !SIGN, INF_BITS, 0, 0, 0, 0, 0, 0, 0, 0];
    let rc = 3u32 << 13;
    let mut csr = [0u32; 2];
    // SAFETY: the loads and stores stay inside out, tot, sums and w (n * 4
    // values each, asserted) and k; MXCSR is restored before the block ends;
    // the clobbered vector registers are declared.
    unsafe {
        asm!(
            mxcsr_enter!(),
            "vbroadcastsd ymm13, qword ptr [{k}]",
            "vbroadcastsd ymm14, qword ptr [{k} + 8]",
            "vpbroadcastq ymm15, qword ptr [{k} + 16]",
            "vpbroadcastq ymm12, qword ptr [{k} + 24]",
            "vbroadcastsd ymm10, qword ptr [{k} + 32]",
            "vxorpd ymm11, ymm11, ymm11",
            "vxorpd ymm9, ymm9, ymm9",
            "2:",
            "vmulpd ymm0, ymm13, ymmword ptr [{pt}]",
            "vmulpd ymm1, ymm13, ymmword ptr [{ps}]",
            "vaddpd ymm0, ymm0, ymm1",
            "vpaddq ymm0, ymm0, ymmword ptr [{pw}]",
            "vpand ymm0, ymm0, ymm15",
            "vandpd ymm1, ymm0, ymm12",
            "vmaxpd ymm11, ymm11, ymm1",
            // Not below infinity, or unordered.
            "vcmppd ymm2, ymm1, ymm10, 5",
            "vorpd ymm9, ymm9, ymm2",
            "vmulpd ymm0, ymm0, ymm14",
            "vmovupd ymmword ptr [{po}], ymm0",
            "add {pt}, 32",
            "add {ps}, 32",
            "add {pw}, 32",
            "add {po}, 32",
            "dec {n}",
            "jnz 2b",
            "vmovupd ymmword ptr [{k} + 40], ymm11",
            "vmovupd ymmword ptr [{k} + 72], ymm9",
            "vldmxcsr dword ptr [{csr}]",
            po = inout(reg) out.as_mut_ptr() => _,
            pt = inout(reg) tot.as_ptr() => _,
            ps = inout(reg) sums.as_ptr() => _,
            pw = inout(reg) w.as_ptr() => _,
            n = inout(reg) n => _,
            csr = in(reg) csr.as_mut_ptr(),
            rc = in(reg) rc,
            t = out(reg) _,
            k = in(reg) k.as_mut_ptr(),
            out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm9") _, out("ymm10") _,
            out("ymm11") _, out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
            options(nostack),
        );
    }
    if k[9..].iter().any(|&f| f != 0) {
        return f64::INFINITY;
    }
    k[5..9].iter().fold(0f64, |m, &x| m.max(f64::from_bits(x)))
}

/// Products of at most [`FEW_ROWS`] rows on f64 lanes ([`drive`]'s few-row path):
/// the source of B's values of a [`sr64_rows`] block, 16 columns a step:
/// f64 values (`[kk*16 + l]`), or bfloat16, float16, float8_e5m2 or
/// float8_e4m3fn codes read in place (e4m3fn's decode to 2^-8 times their
/// values: the caller scales A by 2^8 more).
const ROWS_F64: u8 = 0;
const ROWS_BF16: u8 = 1;
const ROWS_F16: u8 = 2;
const ROWS_E5M2: u8 = 3;
const ROWS_E4M3FN: u8 = 4;

/// The rows of A a product may have for [`drive`]'s few-row path.
const FEW_ROWS: usize = 6;

/// How [`sr64_rows`]' Weyl lanes map to columns: lane L of a half of 8 columns
/// holds column `ROWS_LANES[L]`, so that the words of the even lanes (the low
/// halves of the u64 lanes) are columns 0-3 in order, and those of the odd
/// lanes 4-7.
const ROWS_LANES: [usize; 8] = [0, 4, 1, 5, 2, 6, 3, 7];

/// The constants of [`sr64_rows`], and the largest magnitude it returns.
#[repr(C, align(32))]
struct RowsConsts {
    /// The columns' Weyl step (offset 0), the two multipliers of `mix32`
    /// (32, 64).
    gamma: [u32; 8],
    m1: [u32; 8],
    m2: [u32; 8],
    /// A word's top `rbits` bits in the low half of each u64 lane (96), and in
    /// the high half (128).
    top_lo: [u64; 4],
    top_hi: [u64; 4],
    /// The shifts that place them below the unit (bit `d`): the low halves'
    /// left by `d - 32` (or right by `32 - d`, [`sr64_rows`]' `LEFT`) (160), the
    /// high halves' right by `64 - d` (176).
    shift_lo: [u64; 2],
    shift_hi: [u64; 2],
    /// The mask that truncates at the unit (192), the magnitude bits (224), and
    /// the largest magnitude of a rounded sum, out (256).
    unit: [u64; 4],
    abs: [u64; 4],
    max: [u64; 4],
    /// The float16 pattern's bits an e4m3fn code's sign extension must not set (288).
    e4m3: [u16; 8],
}

/// One quarter (4 columns) of B's values of a [`sr64_rows`] step into ymm12:
/// f64 values at byte `$o` of the step's; float16 codes at byte `$c`;
/// bfloat16 codes each under 16 zero bits (xmm15), the low (`$bq` = `lo`) or
/// high 4 of the 8 at byte `$h`; float8 codes, the half's 8 at byte `$b8`
/// decoded by its low quarter into 8 f32 lanes (ymm15, which the float8
/// kernels need not keep zero) as float16 patterns: an e5m2 code is the top
/// byte of one; an e4m3fn code sign-extended and moved up 7 bits, its bit 14
/// cleared, is the float16 of its value times 2^-8 (as [`super::kernels`]'
/// packing decodes them).
#[cfg(target_arch = "x86_64")]
macro_rules! rows_dec {
    (f64, $bq:ident, $o:literal, $c:literal, $h:literal, $b8:literal) => {
        concat!("vmovupd ymm12, ymmword ptr [{pb} + ", $o, "]\n")
    };
    (bf16, lo, $o:literal, $c:literal, $h:literal, $b8:literal) => {
        concat!("vpunpcklwd xmm12, xmm15, xmmword ptr [{pb} + ", $h, "]\n", "vcvtps2pd ymm12, xmm12\n")
    };
    (bf16, hi, $o:literal, $c:literal, $h:literal, $b8:literal) => {
        concat!("vpunpckhwd xmm12, xmm15, xmmword ptr [{pb} + ", $h, "]\n", "vcvtps2pd ymm12, xmm12\n")
    };
    (f16, $bq:ident, $o:literal, $c:literal, $h:literal, $b8:literal) => {
        concat!("vcvtph2ps xmm12, qword ptr [{pb} + ", $c, "]\n", "vcvtps2pd ymm12, xmm12\n")
    };
    (e5m2, lo, $o:literal, $c:literal, $h:literal, $b8:literal) => {
        concat!(
            "vpmovzxbw xmm15, qword ptr [{pb} + ", $b8, "]\n",
            "vpsllw xmm15, xmm15, 8\n",
            "vcvtph2ps ymm15, xmm15\n",
            "vcvtps2pd ymm12, xmm15\n",
        )
    };
    (e4m3, lo, $o:literal, $c:literal, $h:literal, $b8:literal) => {
        concat!(
            "vpmovsxbw xmm15, qword ptr [{pb} + ", $b8, "]\n",
            "vpsllw xmm15, xmm15, 7\n",
            "vpand xmm15, xmm15, xmmword ptr [{k} + 288]\n",
            "vcvtph2ps ymm15, xmm15\n",
            "vcvtps2pd ymm12, xmm15\n",
        )
    };
    ($f8:ident, hi, $o:literal, $c:literal, $h:literal, $b8:literal) => {
        concat!("vextractf128 xmm12, ymm15, 1\n", "vcvtps2pd ymm12, xmm12\n")
    };
}

/// The placed column words of half `$w` (ymm8: columns 0-7, ymm9: 8-15) of a
/// [`sr64_rows`] step: its Weyl values advanced by gamma, `mix32` (ymm13
/// scratch; its multipliers where `rows_part!` has them for `$mr` rows and
/// adds `$t`), complemented and cut to the top
/// `rbits` bits, the even lanes' (the low halves of the u64 lanes) into
/// ymm11, the odd lanes' into ymm10, each shifted to end below the unit
/// ([`Words::place_col`]): ymm11 the half's columns 0-3, ymm10 4-7. `$sh`:
/// the low halves' shift (left, or right for a unit below bit 32).
#[cfg(target_arch = "x86_64")]
macro_rules! rows_words {
    ($sh:literal, $mr:tt, $t:ident, $w:literal) => {
        concat!(
            "vpaddd ", $w, ", ", $w, ", ymmword ptr [{k}]\n",
            "vpsrld ymm13, ", $w, ", 16\n",
            "vpxor ymm10, ", $w, ", ymm13\n",
            "vpmulld ymm10, ymm10, ", rows_part!($mr, $t, m1), "\n",
            "vpsrld ymm13, ymm10, 15\n",
            "vpxor ymm10, ymm10, ymm13\n",
            "vpmulld ymm10, ymm10, ", rows_part!($mr, $t, m2), "\n",
            "vpsrld ymm13, ymm10, 16\n",
            "vpxor ymm10, ymm10, ymm13\n",
            "vpandn ymm11, ymm10, ymmword ptr [{k} + 96]\n",
            "vpandn ymm10, ymm10, ymmword ptr [{k} + 128]\n",
            $sh, " ymm11, ymm11, xmmword ptr [{k} + 160]\n",
            "vpsrlq ymm10, ymm10, xmmword ptr [{k} + 176]\n",
        )
    };
}

/// One accumulator's add of a [`sr64_rows`] step, as [`sr_acc`]: the row's
/// placed word `$u` xor the columns' `$p`, the FMA toward zero with B's values
/// (ymm12) and the row's `a` (`$a`), the add of the random complement, the
/// bits below the unit cleared (`$unit`); `track`, the largest magnitude kept
/// in ymm14.
#[cfg(target_arch = "x86_64")]
macro_rules! rows_acc {
    (plain, $c:literal, $p:literal, $u:literal, $a:literal, $unit:literal) => {
        concat!(
            "vpxor ymm13, ", $p, ", ", $u, "\n",
            "vfmadd231pd ", $c, ", ymm12, ", $a, "\n",
            "vpaddq ", $c, ", ", $c, ", ymm13\n",
            "vpand ", $c, ", ", $c, ", ", $unit, "\n",
        )
    };
    (track, $c:literal, $p:literal, $u:literal, $a:literal, $unit:literal) => {
        concat!(
            rows_acc!(plain, $c, $p, $u, $a, $unit),
            "vandpd ymm13, ", $c, ", ymmword ptr [{k} + 224]\n",
            "vmaxpd ymm14, ymm14, ymm13\n",
        )
    };
}

/// A quarter of a [`sr64_rows`] step: B's values (`rows_dec!($src, ...)`),
/// then the adds of one row (accumulator `$c0`: its `a` in ymm4, its word in
/// ymm5, the unit mask in ymm6) or two (`$c1` too: each row's `a` and word
/// read from the step's, the second's 32 bytes on; the unit mask in ymm14, or
/// read with `track`).
#[cfg(target_arch = "x86_64")]
macro_rules! rows_quarter {
    (1, $t:ident, $src:ident, $bq:ident, $o:literal, $cb:literal, $h:literal, $b8:literal, $p:literal, $c0:literal, $c1:literal) => {
        concat!(rows_dec!($src, $bq, $o, $cb, $h, $b8), rows_acc!($t, $c0, $p, "ymm5", "ymm4", "ymm6"))
    };
    (2, plain, $src:ident, $bq:ident, $o:literal, $cb:literal, $h:literal, $b8:literal, $p:literal, $c0:literal, $c1:literal) => {
        concat!(
            rows_dec!($src, $bq, $o, $cb, $h, $b8),
            rows_acc!(plain, $c0, $p, "ymmword ptr [{pu}]", "ymmword ptr [{pa}]", "ymm14"),
            rows_acc!(plain, $c1, $p, "ymmword ptr [{pu} + 32]", "ymmword ptr [{pa} + 32]", "ymm14"),
        )
    };
    (2, track, $src:ident, $bq:ident, $o:literal, $cb:literal, $h:literal, $b8:literal, $p:literal, $c0:literal, $c1:literal) => {
        concat!(
            rows_dec!($src, $bq, $o, $cb, $h, $b8),
            rows_acc!(track, $c0, $p, "ymmword ptr [{pu}]", "ymmword ptr [{pa}]", "ymmword ptr [{k} + 192]"),
            rows_acc!(track, $c1, $p, "ymmword ptr [{pu} + 32]", "ymmword ptr [{pa} + 32]", "ymmword ptr [{k} + 192]"),
        )
    };
}

/// The parts of a [`sr64_rows`] block that depend on its rows and adds: the
/// registers set up, the accumulators loaded and stored, the step's start,
/// the multipliers' operands, the largest magnitude stored.
#[cfg(target_arch = "x86_64")]
macro_rules! rows_part {
    (1, $t:ident, load) => {
        concat!(
            "vmovupd ymm0, ymmword ptr [{c}]\n",
            "vmovupd ymm1, ymmword ptr [{c} + 32]\n",
            "vmovupd ymm2, ymmword ptr [{c} + 64]\n",
            "vmovupd ymm3, ymmword ptr [{c} + 96]\n",
            "vmovdqu ymm6, ymmword ptr [{k} + 192]\n",
            "vmovdqu ymm7, ymmword ptr [{k} + 32]\n",
            rows_part!(1, $t, m2load),
        )
    };
    (1, plain, m2load) => { "vmovdqu ymm14, ymmword ptr [{k} + 64]\n" };
    (1, track, m2load) => { "vpxor ymm14, ymm14, ymm14\n" };
    (1, $t:ident, store) => {
        concat!(
            "vmovupd ymmword ptr [{c}], ymm0\n",
            "vmovupd ymmword ptr [{c} + 32], ymm1\n",
            "vmovupd ymmword ptr [{c} + 64], ymm2\n",
            "vmovupd ymmword ptr [{c} + 96], ymm3\n",
            rows_part!(1, $t, max),
        )
    };
    (1, $t:ident, step) => { "vbroadcastsd ymm4, qword ptr [{pa}]\nvpbroadcastq ymm5, qword ptr [{pu}]\n" };
    (1, $t:ident, m1) => { "ymm7" };
    (1, plain, m2) => { "ymm14" };
    (1, track, m2) => { "ymmword ptr [{k} + 64]" };
    (2, $t:ident, load) => {
        concat!(
            "vmovupd ymm0, ymmword ptr [{c}]\n",
            "vmovupd ymm1, ymmword ptr [{c} + 32]\n",
            "vmovupd ymm2, ymmword ptr [{c} + 64]\n",
            "vmovupd ymm3, ymmword ptr [{c} + 96]\n",
            "vmovupd ymm4, ymmword ptr [{c} + 128]\n",
            "vmovupd ymm5, ymmword ptr [{c} + 160]\n",
            "vmovupd ymm6, ymmword ptr [{c} + 192]\n",
            "vmovupd ymm7, ymmword ptr [{c} + 224]\n",
            rows_part!(2, $t, unit),
        )
    };
    (2, plain, unit) => { "vmovdqu ymm14, ymmword ptr [{k} + 192]\n" };
    (2, track, unit) => { "vpxor ymm14, ymm14, ymm14\n" };
    (2, $t:ident, store) => {
        concat!(
            "vmovupd ymmword ptr [{c}], ymm0\n",
            "vmovupd ymmword ptr [{c} + 32], ymm1\n",
            "vmovupd ymmword ptr [{c} + 64], ymm2\n",
            "vmovupd ymmword ptr [{c} + 96], ymm3\n",
            "vmovupd ymmword ptr [{c} + 128], ymm4\n",
            "vmovupd ymmword ptr [{c} + 160], ymm5\n",
            "vmovupd ymmword ptr [{c} + 192], ymm6\n",
            "vmovupd ymmword ptr [{c} + 224], ymm7\n",
            rows_part!(2, $t, max),
        )
    };
    (2, $t:ident, step) => { "" };
    (2, $t:ident, m1) => { "ymmword ptr [{k} + 32]" };
    (2, $t:ident, m2) => { "ymmword ptr [{k} + 64]" };
    ($mr:tt, plain, max) => { "" };
    ($mr:tt, track, max) => { "vmovupd ymmword ptr [{k} + 256], ymm14\n" };
}

/// The assembly block of [`sr64_rows`]: `$mr` rows (1 or 2), adds `$t`, B's
/// values from `$src`, the words' low halves shifted by `$sh`.
#[cfg(target_arch = "x86_64")]
macro_rules! rows_asm {
    ($mr:tt, $t:ident, $src:ident, $sh:literal, $acc:expr, $ap:expr, $up:expr, $pb:expr, $ld:expr, $pf:expr, $weyl:expr, $k:expr, $kn:expr, $csr:expr, $rc:expr) => {
        asm!(
            mxcsr_enter!(),
            "vpxor ymm15, ymm15, ymm15",
            "vmovdqu ymm8, ymmword ptr [{w}]",
            "vmovdqu ymm9, ymmword ptr [{w} + 32]",
            rows_part!($mr, $t, load),
            "2:",
            rows_part!($mr, $t, step),
            rows_words!($sh, $mr, $t, "ymm8"),
            rows_quarter!($mr, $t, $src, lo, "0", "0", "0", "0", "ymm11", "ymm0", "ymm4"),
            rows_quarter!($mr, $t, $src, hi, "32", "8", "0", "0", "ymm10", "ymm1", "ymm5"),
            rows_words!($sh, $mr, $t, "ymm9"),
            rows_quarter!($mr, $t, $src, lo, "64", "16", "16", "8", "ymm11", "ymm2", "ymm6"),
            rows_quarter!($mr, $t, $src, hi, "96", "24", "16", "8", "ymm10", "ymm3", "ymm7"),
            "prefetcht0 byte ptr [{pf}]",
            "add {pa}, {st}",
            "add {pu}, {st}",
            "add {pb}, {ld}",
            "add {pf}, {pfs}",
            "dec {kn}",
            "jnz 2b",
            rows_part!($mr, $t, store),
            "vstmxcsr dword ptr [{csr} + 4]",
            "vldmxcsr dword ptr [{csr}]",
            c = in(reg) $acc.as_mut_ptr(),
            pa = inout(reg) $ap.as_ptr() => _,
            pu = inout(reg) $up.as_ptr() => _,
            pb = inout(reg) $pb => _,
            ld = in(reg) $ld,
            pf = inout(reg) $pf.0 => _,
            pfs = in(reg) $pf.1,
            st = in(reg) $mr * 32usize,
            w = in(reg) $weyl.as_ptr(),
            k = in(reg) ($k as *mut RowsConsts),
            kn = inout(reg) $kn => _,
            csr = in(reg) $csr.as_mut_ptr(),
            rc = in(reg) $rc,
            t = out(reg) _,
            out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
            out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
            out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
            out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
            options(nostack),
        )
    };
}

/// The stochastic kernel of [`drive`]'s few-row path: `kn` steps of `MR` rows
/// (1 or 2) x 16 columns of f64 accumulators (`acc[r*16 + l]`, on values
/// scaled by 2^[`Fast::sr_scale`]), each add as [`tile64_sr`]'s, with the
/// columns' words drawn in the kernel instead of read from a panel: per step,
/// the 16 columns' Weyl values (`weyl`, laid out by [`ROWS_LANES`], each
/// gamma below its first step's) advance by gamma and are mixed
/// ([`StepRand::col_weyl`]: they must keep the index's high half over the
/// `kn` steps), then complemented and placed as [`Words::place_col`], which
/// costs 28 vector operations a step for the 16 columns (that the rows share)
/// where [`tile64_sr`] reads a placed panel that the caller fills; with one
/// row, its work is a column word per add either way. `ap` holds each step's
/// rows' scaled `a` and `up` their placed words ([`Words::place_row`]), each
/// broadcast to 4 lanes (`[(kk*MR + r)*4 + l]`); B's values are read from `pb`
/// (`ld` bytes a step) as `SRC` ([`ROWS_F64`], [`ROWS_BF16`], [`ROWS_F16`]).
/// Each step prefetches the line at `pf.0 + kk * pf.1` (the next depth
/// block's codes, which the caller's scan then finds in the cache while this
/// block's arithmetic has hidden their fetch; a prefetch never faults).
/// `k` holds the constants (`LEFT`: the unit `d` is at least bit 32, and the
/// words' low halves shift left); with `TRACK` the largest magnitude of any
/// rounded sum is left in `k.max`. Returns whether some FMA was inexact (MXCSR's
/// precision flag), as [`tile64_sr`].
///
/// # Safety
/// The CPU must support avx2, fma and f16c; `ap` and `up` hold kn*MR*4
/// values; the `kn` steps' 16 values or codes from `pb`, `ld` bytes apart,
/// are readable; the shifts in `k` are below 64 and `kn` is at least 1.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn sr64_rows<const MR: usize, const SRC: u8, const TRACK: bool, const LEFT: bool>(acc: &mut [f64; 32], ap: &[f64], up: &[u64], pb: *const u8, ld: isize, pf: (*const u8, isize), weyl: &[u32; 16], k: &mut RowsConsts, kn: usize) -> bool {
    use std::arch::asm;
    assert!((MR == 1 || MR == 2) && SRC <= ROWS_E4M3FN && kn >= 1 && ap.len() >= kn * MR * 4 && up.len() >= kn * MR * 4);
    // Toward zero.
    let rc = 3u32 << 13;
    let mut csr = [0u32; 2];
    // SAFETY: the loads and stores stay inside acc (32 values), ap and up (kn*MR*4,
    // asserted), weyl and k, and B's values (the caller's contract); MXCSR is
    // restored before the block ends; every vector register is declared clobbered.
    unsafe {
        // (`$sh` of the words' low halves: left by d - 32, or right by 32 - d.)
        macro_rules! go {
            ($mr:tt, $t:ident, $sh:literal) => {
                match SRC {
                    ROWS_F64 => rows_asm!($mr, $t, f64, $sh, acc, ap, up, pb, ld, pf, weyl, k, kn, csr, rc),
                    ROWS_BF16 => rows_asm!($mr, $t, bf16, $sh, acc, ap, up, pb, ld, pf, weyl, k, kn, csr, rc),
                    ROWS_F16 => rows_asm!($mr, $t, f16, $sh, acc, ap, up, pb, ld, pf, weyl, k, kn, csr, rc),
                    ROWS_E5M2 => rows_asm!($mr, $t, e5m2, $sh, acc, ap, up, pb, ld, pf, weyl, k, kn, csr, rc),
                    _ => rows_asm!($mr, $t, e4m3, $sh, acc, ap, up, pb, ld, pf, weyl, k, kn, csr, rc),
                }
            };
        }
        match (MR, TRACK, LEFT) {
            (1, false, true) => go!(1, plain, "vpsllq"),
            (1, true, true) => go!(1, track, "vpsllq"),
            (_, false, true) => go!(2, plain, "vpsllq"),
            (_, true, true) => go!(2, track, "vpsllq"),
            (1, false, false) => go!(1, plain, "vpsrlq"),
            (1, true, false) => go!(1, track, "vpsrlq"),
            (_, false, false) => go!(2, plain, "vpsrlq"),
            (_, true, false) => go!(2, track, "vpsrlq"),
        }
    }
    csr[1] & MXCSR_PE != 0
}

/// A block of [`drive`]'s few-row path for [`sr64_rows`]: B's values of its
/// 16 columns, and the columns' Weyl values.
#[derive(Clone, Copy)]
struct RowsBlock<'a> {
    /// [`ROWS_F64`], [`ROWS_BF16`] or [`ROWS_F16`], where the first step's
    /// values start, and the bytes from one step's to the next.
    src: u8,
    pb: *const u8,
    ld: isize,
    /// The lines a step prefetches ([`sr64_rows`]): the first, and the bytes
    /// from one to the next.
    pf: (*const u8, isize),
    weyl: &'a [u32; 16],
    gamma: u32,
}

impl<const M: u8> Fast<M> {
    /// [`sr64_rows`] on `nr` rows (1 or 2) x `w` columns (at most 16) of `acc`
    /// (row stride `ldc`), as [`Fast::tile_sr_run`] runs [`tile64_sr`]: `ap`
    /// and `up` hold the rows' scaled values and placed words, broadcast, `blk`
    /// B's values and the columns' words (16 columns: those past `w` are
    /// computed and dropped), `a` and `b` the bounds of the block's A and B
    /// values. `false` (nothing written) as [`Fast::tile_sr_run`].
    ///
    /// # Safety
    /// As [`sr64_rows`]' for `blk`'s values: `kn` steps of 16 from `blk.pb`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn rows_sr_run(&self, nr: usize, w: usize, acc: &mut [f64], ldc: usize, ap: &[f64], up: &[u64], blk: RowsBlock, kn: usize, rbits: u32, a: Bounds64, b: Bounds64) -> bool {
        let Some((s, checked)) = self.sr_checked(rbits) else { return false };
        if !super::simd() || !(1..=2).contains(&nr) || !(1..=16).contains(&w) || rbits > 32 || a.1 || b.1 {
            return false;
        }
        if kn == 0 {
            return true;
        }
        assert!(acc.len() >= (nr - 1) * ldc + w && ap.len() >= kn * nr * 4 && up.len() >= kn * nr * 4);
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (s, checked, acc, ldc, ap, up, blk);
            false
        }
        #[cfg(target_arch = "x86_64")]
        {
            let (sc, back) = (pow2(s), pow2(-s));
            let mut t = [0f64; 32];
            let mut amax = 0f64;
            for r in 0..nr {
                for l in 0..w {
                    let v = acc[r * ldc + l];
                    if !v.is_finite() {
                        return false;
                    }
                    amax = amax.max(v.abs());
                    t[r * 16 + l] = v * sc;
                }
            }
            let max = f64::from_bits(self.max_bits);
            let track = self.sr_watch(amax, kn, a, b);
            let d = 52 - self.man;
            let top = (u32::MAX << (32 - rbits)) as u64;
            let left = d >= 32;
            let mut k = RowsConsts {
                gamma: [blk.gamma; 8],
                m1: [0x7feb_352d; 8],
                m2: [0x846c_a68b; 8],
                top_lo: [top; 4],
                top_hi: [top << 32; 4],
                shift_lo: [if left { d - 32 } else { 32 - d } as u64, 0],
                shift_hi: [(64 - d) as u64, 0],
                unit: [!((1u64 << d) - 1); 4],
                abs: [!SIGN; 4],
                max: [0; 4],
                e4m3: [0xbfff; 8],
            };
            // SAFETY: `simd` holds only where avx2, fma and f16c were detected; ap and up
            // hold kn*nr*4 values (asserted), B's values are readable per the caller; the
            // shift is 64 - d with d = 52 - man of 2 to 52.
            let inexact = unsafe {
                macro_rules! go {
                    ($mr:literal, $tr:literal, $left:literal) => {
                        match blk.src {
                            ROWS_F64 => sr64_rows::<$mr, ROWS_F64, $tr, $left>(&mut t, ap, up, blk.pb, blk.ld, blk.pf, blk.weyl, &mut k, kn),
                            ROWS_BF16 => sr64_rows::<$mr, ROWS_BF16, $tr, $left>(&mut t, ap, up, blk.pb, blk.ld, blk.pf, blk.weyl, &mut k, kn),
                            ROWS_F16 => sr64_rows::<$mr, ROWS_F16, $tr, $left>(&mut t, ap, up, blk.pb, blk.ld, blk.pf, blk.weyl, &mut k, kn),
                            ROWS_E5M2 => sr64_rows::<$mr, ROWS_E5M2, $tr, $left>(&mut t, ap, up, blk.pb, blk.ld, blk.pf, blk.weyl, &mut k, kn),
                            _ => sr64_rows::<$mr, ROWS_E4M3FN, $tr, $left>(&mut t, ap, up, blk.pb, blk.ld, blk.pf, blk.weyl, &mut k, kn),
                        }
                    };
                }
                match (nr, track, left) {
                    (1, false, true) => go!(1, false, true),
                    (1, true, true) => go!(1, true, true),
                    (_, false, true) => go!(2, false, true),
                    (_, true, true) => go!(2, true, true),
                    (1, false, false) => go!(1, false, false),
                    (1, true, false) => go!(1, true, false),
                    (_, false, false) => go!(2, false, false),
                    (_, true, false) => go!(2, true, false),
                }
            };
            let mx = k.max.iter().fold(0f64, |m, &x| m.max(f64::from_bits(x)));
            // Past the largest value, or (checked) some sum not exact: void.
            if mx > max * sc || (checked && inexact) {
                return false;
            }
            for r in 0..nr {
                for l in 0..w {
                    acc[r * ldc + l] = t[r * 16 + l] * back;
                }
            }
            true
        }
    }
}

impl<const M: u8> Round for Fast<M> {
    const STOCHASTIC: bool = M == M_ST;
    fn has_tile(&self, simd: bool, rbits: u32) -> bool {
        simd && (self.tile_ok(rbits) || self.sr_checked(rbits).is_some())
    }
    fn tile(&self, simd: bool, nr: usize, acc: &mut [f64], ldc: usize, ap: &[f64], bp: &[f64], ldb: usize, kn: usize, words: Words, rbits: u32, exact: bool, track: bool) -> bool {
        self.tile_run(simd, nr, acc, ldc, ap, bp, ldb, kn, words, rbits, exact, track)
    }
    fn quiet(&self, a: Bounds64, b: Bounds64, acc_max: f64, kn: usize) -> bool {
        self.quiet_ok(a, b, acc_max, kn)
    }
    fn exact_vals(&self, acc: Bounds64, acc_max: f64, a: Bounds64, b: Bounds64, kn: usize) -> bool {
        self.exact_ok(acc, acc_max, a, b, kn)
    }
    fn prec(&self) -> i32 {
        self.man as i32 + 1
    }
    fn sr_scale(&self, simd: bool, rbits: u32) -> Option<i32> {
        if simd {
            self.sr_checked(rbits).map(|x| x.0)
        } else {
            None
        }
    }
    fn tile_sr(&self, nr: usize, acc: &mut [f64], ldc: usize, aps: &[f64], bp: &[f64], ld: usize, kn: usize, words: Words, rbits: u32, a: Bounds64, b: Bounds64) -> bool {
        self.tile_sr_run(true, nr, acc, ldc, aps, bp, ld, kn, words, rbits, a, b)
    }
    fn ne_tile_scale(&self, simd: bool) -> Option<i32> {
        if simd {
            self.ne_scale()
        } else {
            None
        }
    }
    fn tile_ne(&self, nr: usize, acc: &mut [f64], ldc: usize, aps: &[f64], bp: &[f64], ld: usize, kn: usize, a: Bounds64, b: Bounds64) -> bool {
        self.tile_ne_run(true, nr, acc, ldc, aps, bp, ld, kn, a, b)
    }
    unsafe fn rows_sr(&self, nr: usize, w: usize, acc: &mut [f64], ldc: usize, ap: &[f64], up: &[u64], blk: RowsBlock, kn: usize, rbits: u32, a: Bounds64, b: Bounds64) -> bool {
        // SAFETY: forwarded contract.
        unsafe { self.rows_sr_run(nr, w, acc, ldc, ap, up, blk, kn, rbits, a, b) }
    }
    fn step_st(&self, simd: bool, row: &mut [f64], bp: &[f64], av: f64, u: u64, vw: &[u64], rbits: u32, exact: bool) -> bool {
        #[cfg(target_arch = "x86_64")]
        if simd && M == M_ST && rbits <= 32 && 52 - self.man >= rbits {
            // SAFETY: `simd` is only true when avx2 was detected.
            unsafe {
                if exact {
                    self.step_st_avx2::<true>(row, bp, av, u, vw, rbits)
                } else {
                    self.step_st_avx2::<false>(row, bp, av, u, vw, rbits)
                }
            };
            return true;
        }
        let _ = (simd, row, bp, av, u, vw, rbits, exact);
        false
    }
    fn step(&self, simd: bool, row: &mut [f64], bp: &[f64], av: f64, rands: &[u64], old: &mut [f64], bad: &mut [u8]) {
        #[cfg(target_arch = "x86_64")]
        if simd {
            // SAFETY: `simd` is only true when avx2 was detected.
            return unsafe { self.step_avx2(row, bp, av, rands) };
        }
        step(simd, self, row, bp, av, rands, old, bad)
    }
    #[inline(always)]
    fn add(&self, a: f64, b: f64, rand: u64) -> f64 {
        let (s, e) = two_sum(a, b);
        self.round(to_odd(s, e), rand)
    }
    #[inline(always)]
    fn add_fast(&self, a: f64, b: f64, rand: u64) -> (f64, bool) {
        let (s, e) = two_sum(a, b);
        let (v, bad) = self.round_nobranch(to_odd_nobranch(s, e), rand);
        // A non-finite s (overflow of f64 itself) goes the exact way too.
        (v, bad | !s.is_finite())
    }
}

/// float64 accumulators: `s` is the nearest-even sum, `e` tells the other modes where the exact sum lies.
#[derive(Clone, Copy, Debug)]
struct F64Acc {
    mode: Mode,
    /// Random bits of a stochastic add.
    rbits: u32,
}

impl F64Acc {
    fn new(opts: &RoundOpts) -> F64Acc {
        F64Acc { mode: opts.mode, rbits: opts.rbits }
    }
}

impl F64Acc {
    /// `round(a + b)` of finite `a`, `b` whose nearest-even sum overflows: the
    /// exact sum lies at or beyond half the last gap past the largest value
    /// (2^1024 - 2^970), and the modes that keep it finite give the largest
    /// value (stochastic: when the random bits are not below the share of the
    /// last gap, 2^971, it lies past the largest value).
    #[cold]
    fn overflow(&self, a: f64, b: f64, rand: u64) -> f64 {
        let neg = a + b < 0.0;
        let stochastic_up = self.mode == Mode::Stochastic && {
            // Halves are exact here (a subnormal's lost bit is far below every
            // decision), and their sum is finite: |x| - max, in units of 2^971,
            // from (|x| / 2 - max / 2) * 2^-970 (Sterbenz: exact), plus the tail.
            let (h, t) = two_sum(a * 0.5, b * 0.5);
            let (h, t) = if neg { (-h, -t) } else { (h, t) };
            let past = ((h - f64::MAX * 0.5) + t) * 2f64.powi(-970);
            past >= 1.0 || (rand as u128) < (past * 2f64.powi(self.rbits as i32)).floor() as u128
        };
        self.past_max(neg, stochastic_up)
    }

    /// A value past the largest finite one (sign `neg`) in the mode: infinity, or
    /// the largest value where the mode keeps it finite (stochastic: infinity when
    /// `stochastic_up`).
    fn past_max(&self, neg: bool, stochastic_up: bool) -> f64 {
        let up = match self.mode {
            Mode::NearestEven | Mode::NearestAway => true,
            Mode::TowardZero | Mode::Odd => false,
            Mode::Up => !neg,
            Mode::Down => neg,
            Mode::Stochastic => stochastic_up,
        };
        let v = if up { f64::INFINITY } else { f64::MAX };
        if neg { -v } else { v }
    }
}

impl Round for F64Acc {
    const STOCHASTIC: bool = true; // decided at run time by the mode
    #[inline(always)]
    fn add(&self, a: f64, b: f64, rand: u64) -> f64 {
        let (s, e) = two_sum_big(a, b);
        if s.is_infinite() && a.is_finite() && b.is_finite() {
            return self.overflow(a, b, rand);
        }
        if e == 0.0 || !s.is_finite() {
            return s;
        }
        let bits = s.to_bits();
        // +1 on the bits grows |s|, -1 shrinks it (s != 0 when e != 0).
        let grow = f64::from_bits(bits + 1);
        let shrink = f64::from_bits(bits - 1);
        let same_sign = (e > 0.0) == (s > 0.0);
        match self.mode {
            Mode::TowardZero => {
                if same_sign {
                    s
                } else {
                    shrink
                }
            }
            Mode::Up => {
                if e > 0.0 {
                    if s > 0.0 {
                        grow
                    } else {
                        shrink
                    }
                } else {
                    s
                }
            }
            Mode::Down => {
                if e < 0.0 {
                    if s < 0.0 {
                        grow
                    } else {
                        shrink
                    }
                } else {
                    s
                }
            }
            Mode::Odd => to_odd(s, e),
            // A tie (|e| half the gap to the neighbour beyond s) goes to that
            // neighbour; a tie below s (toward zero) keeps s.
            Mode::NearestAway => {
                if same_sign && e.abs() == f64_gap_up(s) * 0.5 {
                    grow
                } else {
                    s
                }
            }
            // The exact sum's magnitude truncated to a float64, and its remainder
            // as a share of the gap to the next: up when the rbits random bits
            // are below the remainder's top rbits bits (every gap is a power of
            // two, so the shares scale exactly).
            Mode::Stochastic => {
                let scale = 2f64.powi(self.rbits as i32);
                if same_sign {
                    // |x| = |s| + |e|: s truncated, remainder |e|.
                    let top = (e.abs() / f64_gap_up(s) * scale).floor() as u128;
                    if (rand as u128) < top {
                        grow
                    } else {
                        s
                    }
                } else {
                    // |x| = |s| - |e|: the float below s truncated, remainder gap - |e|.
                    let top = (1u128 << self.rbits) - (e.abs() / (s - shrink).abs() * scale).ceil() as u128;
                    if (rand as u128) < top {
                        s
                    } else {
                        shrink
                    }
                }
            }
            Mode::NearestEven => s,
        }
    }
}

/// The gap from finite nonzero `s` to the next float64 away from zero (past
/// the largest: to 2^1024, the overflow).
#[inline(always)]
fn f64_gap_up(s: f64) -> f64 {
    let up = f64::from_bits(s.to_bits() + 1);
    if up.is_infinite() {
        2f64.powi(971)
    } else {
        (up - s).abs()
    }
}

/// Any format, through `Format::encode` / `decode`.
#[derive(Clone, Copy, Debug)]
struct Generic {
    fmt: Format,
    opts: RoundOpts,
}

impl Round for Generic {
    const STOCHASTIC: bool = true; // decided at run time by opts.mode
    #[inline(always)]
    fn add(&self, a: f64, b: f64, rand: u64) -> f64 {
        let (s, e) = two_sum_big(a, b);
        let s = if s.is_infinite() && a.is_finite() && b.is_finite() { self.beyond(two_sum(a * 0.5, b * 0.5).0 * 2.0, s) } else { s };
        self.fmt.decode(self.fmt.encode(to_odd(s, e), &self.opts, rand))
    }
}

impl Generic {
    /// What stands for a finite sum past float64's range (formats reaching near
    /// 2^1024), `big` the sum (infinite when it is 2^1024 or more), `s` its sign:
    /// the largest float64, beyond every such format's rounding threshold; and
    /// for stochastic rounding, a sum of 2^1024 or more (past the last gap of
    /// every format) is infinite.
    fn beyond(&self, big: f64, s: f64) -> f64 {
        if self.opts.mode == Mode::Stochastic && big.is_infinite() {
            s
        } else {
            f64::MAX.copysign(s)
        }
    }
}

/// A rounder chosen at run time (chunk totals; rare, so dynamic dispatch is fine).
#[derive(Clone, Copy, Debug)]
enum Dyn {
    Fast(Fast<M_NE>, u8),
    F64(F64Acc),
    Generic(Generic),
}

impl Dyn {
    fn new(fmt: Format, opts: RoundOpts) -> Result<Dyn> {
        if fmt == Format::Float(named::FLOAT64) {
            return Ok(Dyn::F64(F64Acc::new(&opts)));
        }
        if let Format::Float(f) = fmt {
            if f.man_bits > 50 && !fast_ok(&fmt) {
                return Err(Error::value(format!(
                    "accumulate: formats of more than 51 bits of precision (other than float64) are not supported, got {} mantissa bits",
                    f.man_bits
                )));
            }
        }
        if fast_ok(&fmt) {
            let f = Fast::<M_NE>::new(fmt, opts);
            Ok(Dyn::Fast(f, mode_code(opts.mode)))
        } else {
            Ok(Dyn::Generic(Generic { fmt, opts }))
        }
    }

    /// `tot[l] = round(tot[l] + row[l])` for 8 lanes through the register tile
    /// ([`Fast::tile_run`], one step with a = 1; random stream of element `e0 + l`
    /// at step `t0`); `false` when it did not run.
    #[allow(clippy::too_many_arguments)]
    fn tile_add8(&self, simd: bool, tot: &mut [f64], row: &[f64], rng: &Rng, e0: u64, steps: u64, t0: u64, rbits: u32) -> bool {
        let Dyn::Fast(f, m) = self else { return false };
        // Each lane's bits, as the top bits of a column word (the row's is zero), placed.
        let stoch = *m == M_ST && (1..=64).contains(&rbits);
        let d = 52 - f.man;
        let cols: [u64; 8] = if stoch {
            let bits = rng.bits8(std::array::from_fn(|l| (e0 + l as u64).wrapping_mul(steps).wrapping_add(t0)), rbits);
            bits.map(|b| Words::place_col(b << (64 - rbits), rbits, d))
        } else {
            [0; 8]
        };
        let words = Words { rows: &[0; TILE_ROWS], cols: &cols, ldv: 8 };
        by_mode!(*m, C => f.as_mode::<C>().tile_run(simd, 1, tot, 8, &[1.0], row, 8, 1, words, rbits, false, true))
    }

    /// `tot[l] = round(tot[l] + row[l])` across a row of chunk totals (at most
    /// [`JB`]), lane l element `e0 + l` with its random bits (when `stochastic`)
    /// at step `t0`: [`Dyn::flush_sr_row`] where it runs, else 8 lanes at a time
    /// through the register tile ([`Dyn::tile_add8`]), else one add at a time.
    #[allow(clippy::too_many_arguments)]
    fn add_row(&self, simd: bool, tot: &mut [f64], row: &[f64], rng: &Rng, e0: u64, steps: u64, t0: u64, rbits: u32, stochastic: bool, fine: bool) {
        if stochastic && self.flush_sr_row(simd, tot, row, rng, e0, steps, t0, rbits, fine) {
            return;
        }
        let mut j = 0;
        while j + 8 <= tot.len() && self.tile_add8(simd, &mut tot[j..], &row[j..], rng, e0 + j as u64, steps, t0, rbits) {
            j += 8;
        }
        for j in j..tot.len() {
            let rd = if stochastic { rng.bits((e0 + j as u64).wrapping_mul(steps).wrapping_add(t0), rbits) } else { 0 };
            tot[j] = self.add(tot[j], row[j], rd);
        }
    }

    /// `tot[l] = round(tot[l] + row[l])` across a row of chunk totals (at most
    /// [`JB`]) through [`flush64_sr`], stochastic, with the random bits of
    /// element `e0 + l` at step `t0` (those [`Dyn::add`] takes from
    /// [`Rng::bits`]); `false`, nothing written, where it does not run: not
    /// stochastic into a format of [`Fast::sr_scale`] with at most 32 bits, sums
    /// whose values do not scale exactly (`fine`: their format's last bits at or
    /// above the totals'), an inf or NaN, or a total past the largest value.
    #[allow(clippy::too_many_arguments)]
    fn flush_sr_row(&self, simd: bool, tot: &mut [f64], row: &[f64], rng: &Rng, e0: u64, steps: u64, t0: u64, rbits: u32, fine: bool) -> bool {
        let Dyn::Fast(f, m) = self else { return false };
        let n = tot.len();
        if !simd || !fine || *m != M_ST || !(1..=32).contains(&rbits) || !(4..=JB).contains(&n) || row.len() < n {
            return false;
        }
        let Some(s) = f.as_mode::<M_ST>().sr_scale(rbits) else { return false };
        let d = 52 - f.man;
        let mut w = [0u64; JB];
        rng.fill32(e0.wrapping_mul(steps).wrapping_add(t0), steps, &mut w[..n]);
        for x in &mut w[..n] {
            *x = Words::place_col(*x, rbits, d);
        }
        let n4 = n / 4 * 4;
        let mut out = [0f64; JB];
        let sc = pow2(s);
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: `simd` is only true when avx2 and fma were detected; n4 is a multiple of 4
            // and every slice holds at least n4 values.
            let mx = unsafe { flush64_sr(&mut out[..n4], &tot[..n4], &row[..n4], &w[..n4], sc, pow2(-s), d) };
            if mx.is_nan() || mx > f64::from_bits(f.max_bits) * sc {
                return false;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        return false;
        tot[..n4].copy_from_slice(&out[..n4]);
        for j in n4..n {
            let rd = rng.bits((e0 + j as u64).wrapping_mul(steps).wrapping_add(t0), rbits);
            tot[j] = self.add(tot[j], row[j], rd);
        }
        true
    }

    /// [`Kind16::Sr`]'s tile with its wide bits, redone on f64 lanes: rows
    /// `0..nr` of `t` (16 accumulators a row, row-major, unscaled) over `kn`
    /// steps by [`Fast::tile_sr_run`] (two tiles of 8 columns), stochastic
    /// with `rbits` bits, A's values `ap[kk*mr + r] * aun`, B's `bp[kk*16 + l] *
    /// bun` (both exact), element (row0 + r, col0 + l)'s random bits at step
    /// t0 + kk from `words`; `prec`: the inputs' precisions. `false`, `t`
    /// unchanged, where it does not run (then the scalar path).
    #[allow(clippy::too_many_arguments)]
    fn sr_tile64(&self, t: &mut [f32], nr: usize, mr: usize, ap: &[f32], aun: f64, bp: &[f32], bun: f64, kn: usize, words: &StepRand, at: (usize, usize, usize), rbits: u32, prec: (i32, i32), buf: &mut Sr64Buf) -> bool {
        let Dyn::Fast(f, M_ST) = self else { return false };
        let f = f.as_mode::<M_ST>();
        let Some((s, _)) = f.sr_checked(rbits) else { return false };
        let ((row0, col0, t0), d) = (at, 52 - f.man);
        if !(1..=TILE_ROWS).contains(&nr) || nr > mr || kn == 0 || kn > buf.run.len() || t.len() < nr * 16 || ap.len() < kn * mr || bp.len() < kn * 16 {
            return false;
        }
        let (a, b) = (&mut buf.a[..kn * TILE_ROWS], &mut buf.b[..kn * 16]);
        let (u, v) = (&mut buf.u[..kn * TILE_ROWS], &mut buf.v[..kn * 16]);
        a.fill(0.0);
        u.fill(0);
        for kk in 0..kn {
            for r in 0..nr {
                a[kk * TILE_ROWS + r] = ap[kk * mr + r] as f64 * aun;
            }
        }
        for (x, &y) in b.iter_mut().zip(&bp[..kn * 16]) {
            *x = y as f64 * bun;
        }
        let (ab, bb) = (exp_bounds64_of(a, prec.0), exp_bounds64_of(b, prec.1));
        // A's values scale exactly (as `drive` checks).
        if ab.1 || bb.1 || ab.0.is_some_and(|(lo, _)| lo + s < -1074) {
            return false;
        }
        let sc = pow2(s);
        a.iter_mut().for_each(|x| *x *= sc);
        place_tile_rows(words, row0, nr, t0, rbits, d, &mut buf.run[..kn], u);
        for kk in 0..kn {
            let row = &mut v[kk * 16..kk * 16 + 16];
            words.col_run(col0, t0 + kk, rbits, row);
            row.iter_mut().for_each(|w| *w = Words::place_col(*w, rbits, d));
        }
        let mut acc = [0f64; TILE_ROWS * 16];
        for (x, &y) in acc.iter_mut().zip(&t[..nr * 16]) {
            *x = y as f64;
        }
        for h in [0, 8] {
            let w = Words { rows: u, cols: &v[h..], ldv: 16 };
            if !f.tile_sr_run(true, nr, &mut acc[h..], 16, a, &b[h..], 16, kn, w, rbits, ab, bb) {
                return false;
            }
        }
        for (x, &y) in t.iter_mut().zip(&acc[..nr * 16]) {
            *x = y as f32;
        }
        true
    }

    fn add(&self, a: f64, b: f64, rand: u64) -> f64 {
        match self {
            Dyn::Fast(f, m) => {
                let (s, e) = two_sum(a, b);
                let x = to_odd(s, e);
                by_mode!(*m, C => f.as_mode::<C>().round(x, rand))
            }
            Dyn::F64(g) => g.add(a, b, rand),
            Dyn::Generic(g) => g.add(a, b, rand),
        }
    }
}

/// The buffers of [`Dyn::sr_tile64`] for up to `kn` steps: A's values and the
/// rows' placed words ([`TILE_ROWS`] a step), B's values and the columns' (16
/// a step), a row's words.
struct Sr64Buf {
    a: Vec<f64>,
    b: Vec<f64>,
    u: Vec<u64>,
    v: Vec<u64>,
    run: Vec<u64>,
}

impl Sr64Buf {
    fn new(kn: usize) -> Self {
        Sr64Buf { a: vec![0.0; kn * TILE_ROWS], b: vec![0.0; kn * 16], u: vec![0; kn * TILE_ROWS], v: vec![0; kn * 16], run: vec![0; kn] }
    }
}

/// Do the sums' values scale exactly as the chunk totals' (their format's last
/// bits at or above the totals', [`Dyn::flush_sr_row`])?
fn totals_fine(spec: &AccumSpec) -> bool {
    spec.chunk.is_some_and(|(_, f2)| value_bounds(&spec.fmt).0 >= value_bounds(&f2).0)
}

/// Has `f` no negative zero (the fnuz floats, posits, integers)? The f64 kernels
/// truncate a negative sum to -0 as IEEE formats do; in such a format that
/// zero is +0 (the scalar path's encoding), so -0 becomes +0 (`x + 0.0`) where
/// it leaves the accumulation: at chunk totals and at the output. Within it a
/// -0 in place of +0 changes no later nonzero sum.
fn no_neg_zero(f: &Format) -> bool {
    !matches!(f, Format::Float(x) if x.has_neg_zero())
}

/// (precision bits, lowest exponent of any value's last bit, exponent bound: |x| < 2^hi).
fn profile(f: &Format) -> (i32, i32, i32) {
    match f {
        Format::Float(f) => {
            let m = f.man_bits as i32;
            (m + 1, f.emin() - m, f.emax() + 1)
        }
        Format::Posit(p) => {
            let fs = (p.nbits as i32 - 3 - p.es as i32).max(0);
            (fs + 1, -p.max_scale() - fs, p.max_scale() + 1)
        }
        Format::Int(i) => (i.bits as i32, 0, i.bits as i32),
    }
}

/// The bounds (as [`exp_bounds`]) of every value of a format: `profile` without the precision.
fn value_bounds(f: &Format) -> (i32, i32) {
    let (_, lo, hi) = profile(f);
    (lo, hi)
}

/// [`exp_bounds64`]'s result: the bounds, and whether the block holds an inf or NaN.
type Bounds64 = (Option<(i32, i32)>, bool);

/// Bounds of a block of f64 values (as [`exp_bounds`]), each value of `prec`
/// bits, and whether the block holds an inf or NaN.
fn exp_bounds64<'a>(v: impl IntoIterator<Item = &'a f64>, prec: i32) -> Bounds64 {
    let (mut lo, mut hi, mut top) = (u64::MAX, 0u64, 0u64);
    for &x in v {
        let m = x.to_bits() & !SIGN;
        let ok = m != 0 && m < INF_BITS;
        lo = lo.min(if ok { m } else { u64::MAX });
        hi = hi.max(if ok { m } else { 0 });
        top = top.max(m);
    }
    bounds_of(lo, hi, top >= INF_BITS, prec)
}

/// [`exp_bounds64`] of a slice, 4 lanes at a time where avx2 is available.
fn exp_bounds64_of(v: &[f64], prec: i32) -> Bounds64 {
    #[cfg(target_arch = "x86_64")]
    if super::simd() {
        // SAFETY: `simd` is only true when avx2 and fma were detected.
        let (lo, hi, nonfinite) = unsafe { mag_range_avx2(v) };
        return bounds_of(lo, hi, nonfinite, prec);
    }
    exp_bounds64(v, prec)
}

/// The smallest and largest nonzero finite magnitude patterns of `v` (u64::MAX
/// and 0 without one), and whether it holds an inf or NaN.
///
/// # Safety
/// The CPU must support avx2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn mag_range_avx2(v: &[f64]) -> (u64, u64, bool) {
    use std::arch::x86_64::*;
    let mut chunks = v.chunks_exact(4);
    // Every magnitude pattern is below 2^63: signed compares order them.
    let (absm, inf, zero, none) = (_mm256_set1_epi64x(!SIGN as i64), _mm256_set1_epi64x(INF_BITS as i64), _mm256_setzero_si256(), _mm256_set1_epi64x(i64::MAX));
    let (mut lo, mut hi, mut bad) = (none, zero, zero);
    for c in &mut chunks {
        // SAFETY: the chunk holds 4 values.
        let m = _mm256_and_si256(unsafe { _mm256_loadu_si256(c.as_ptr() as *const __m256i) }, absm);
        let fin = _mm256_cmpgt_epi64(inf, m);
        bad = _mm256_or_si256(bad, _mm256_andnot_si256(fin, _mm256_set1_epi64x(-1)));
        let ok = _mm256_andnot_si256(_mm256_cmpeq_epi64(m, zero), fin);
        let cl = _mm256_blendv_epi8(none, m, ok);
        lo = _mm256_blendv_epi8(lo, cl, _mm256_cmpgt_epi64(lo, cl));
        let ch = _mm256_and_si256(m, ok);
        hi = _mm256_blendv_epi8(hi, ch, _mm256_cmpgt_epi64(ch, hi));
    }
    let (mut l, mut h) = ([0u64; 4], [0u64; 4]);
    // SAFETY: 4 lanes each.
    unsafe {
        _mm256_storeu_si256(l.as_mut_ptr() as *mut __m256i, lo);
        _mm256_storeu_si256(h.as_mut_ptr() as *mut __m256i, hi);
    }
    let mut nonfinite = _mm256_movemask_pd(_mm256_castsi256_pd(bad)) != 0;
    let mut lo = l.into_iter().min().unwrap_or(u64::MAX);
    if lo == i64::MAX as u64 {
        lo = u64::MAX;
    }
    let mut hi = h.into_iter().max().unwrap_or(0);
    for &x in chunks.remainder() {
        let m = x.to_bits() & !SIGN;
        let ok = m != 0 && m < INF_BITS;
        lo = lo.min(if ok { m } else { u64::MAX });
        hi = hi.max(if ok { m } else { 0 });
        nonfinite |= m >= INF_BITS;
    }
    (lo, hi, nonfinite)
}

/// [`exp_bounds64`] from the smallest and largest nonzero finite magnitude
/// patterns.
fn bounds_of(lo: u64, hi: u64, nonfinite: bool, prec: i32) -> Bounds64 {
    if hi == 0 {
        return (None, nonfinite);
    }
    // f64 values of these inputs are normal: the exponent field is the binade.
    (Some(((lo >> 52) as i32 - 1023 - (prec - 1), (hi >> 52) as i32 - 1023 + 1)), nonfinite)
}

/// The largest magnitude of `v`; NaN if `v` holds a NaN.
fn abs_max<'a>(v: impl IntoIterator<Item = &'a f64>) -> f64 {
    v.into_iter().fold(0f64, |m, &x| if x.abs() > m || x.is_nan() { x.abs() } else { m })
}

/// Is every `acc + a*b` exact in f64, for accumulator values with bounds `f`
/// (last bits from 2^f.0, |acc| < 2^f.1) and products of values with bounds `a`
/// and `b`? A sum spans at most `max(hi) + 1 - min(lo)` bits. A block without a
/// nonzero finite value has zero products (or inf/NaN ones, which the kernels
/// redo exactly).
fn block_exact(f: (i32, i32), a: Option<(i32, i32)>, b: Option<(i32, i32)>) -> bool {
    let (Some(a), Some(b)) = (a, b) else { return true };
    f.1.max(a.1 + b.1) + 1 - f.0.min(a.0 + b.0) <= 53
}

/// Is every `acc + a*b` exact in f64, from the formats alone ([`block_exact`]
/// with the bounds of the formats' values)?
fn sums_exact_f64(fmt: &Format, a: &Operand, b: &Operand) -> bool {
    let (Some(fa), Some(fb), Format::Float(_)) = (a.format(), b.format(), fmt) else { return false };
    products_exact(&fa, &fb) && block_exact(value_bounds(fmt), Some(value_bounds(&fa)), Some(value_bounds(&fb)))
}

/// Are all products of values of `a` and `b` exact in f64?
pub fn products_exact(a: &Format, b: &Format) -> bool {
    let (pa, la, ha) = profile(a);
    let (pb, lb, hb) = profile(b);
    pa + pb <= 53 && la + lb >= -1074 && ha + hb <= 1023
}

/// One depth step for a row of accumulators: `row[j] = round(row[j] + av*bp[j])`.
#[inline(always)]
fn step_row<R: Round>(r: &R, row: &mut [f64], bp: &[f64], av: f64, rands: &[u64], old: &mut [f64], bad: &mut [u8]) {
    let n = row.len();
    let (bp, rands, old, bad) = (&bp[..n], &rands[..n], &mut old[..n], &mut bad[..n]);
    let mut any = 0u8;
    for j in 0..n {
        let a = row[j];
        old[j] = a;
        let (v, b) = r.add_fast(a, av * bp[j], rands[j]);
        row[j] = v;
        bad[j] = b as u8;
        any |= b as u8;
    }
    if any != 0 {
        for j in 0..n {
            if bad[j] != 0 {
                row[j] = r.add(old[j], av * bp[j], rands[j]);
            }
        }
    }
}

/// [`step_row`] compiled with AVX2 (4 f64 lanes).
///
/// # Safety
/// The CPU must support avx2 and fma.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn step_row_avx2<R: Round>(r: &R, row: &mut [f64], bp: &[f64], av: f64, rands: &[u64], old: &mut [f64], bad: &mut [u8]) {
    step_row(r, row, bp, av, rands, old, bad)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn step<R: Round>(simd: bool, r: &R, row: &mut [f64], bp: &[f64], av: f64, rands: &[u64], old: &mut [f64], bad: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is only true when avx2 and fma were detected.
        return unsafe { step_row_avx2(r, row, bp, av, rands, old, bad) };
    }
    let _ = simd;
    step_row(r, row, bp, av, rands, old, bad)
}

/// `out[j]` = the top `rbits` of `u ^ vw[j]`: the random bits of one depth
/// step for consecutive output elements of a row ([`StepRand`]).
fn fill_rands(u: u64, vw: &[u64], rbits: u32, out: &mut [u64]) {
    out.iter_mut().zip(vw).for_each(|(r, &v)| *r = StepRand::top(u ^ v, rbits));
}

const RB: usize = 16;
const JB: usize = 128;
const KB: usize = 256;

/// Where emulated results go: float64, or float32 when every accumulator
/// format fits in it (each result is an accumulator value, so exact).
#[derive(Clone, Copy, Debug)]
pub enum EmuOut {
    F64(OutMat<f64>),
    F32(OutMat<f32>),
}

impl From<OutMat<f64>> for EmuOut {
    fn from(c: OutMat<f64>) -> Self {
        EmuOut::F64(c)
    }
}

impl From<OutMat<f32>> for EmuOut {
    fn from(c: OutMat<f32>) -> Self {
        EmuOut::F32(c)
    }
}

impl EmuOut {
    /// The transposed view of the same elements.
    fn t(self) -> Self {
        match self {
            EmuOut::F64(c) => EmuOut::F64(c.t()),
            EmuOut::F32(c) => EmuOut::F32(c.t()),
        }
    }

    fn shape(&self) -> (usize, usize) {
        match self {
            EmuOut::F64(c) => (c.rows, c.cols),
            EmuOut::F32(c) => (c.rows, c.cols),
        }
    }

    /// Float32 output needs accumulator formats inside float32.
    fn check(&self, spec: &AccumSpec) -> Result<()> {
        let fits = spec.fmt.fits_f32() && spec.chunk.is_none_or(|(_, f2)| f2.fits_f32());
        if matches!(self, EmuOut::F32(_)) && !fits {
            return Err(Error::type_("out: float32 output needs accumulator formats that fit in float32; use float64"));
        }
        Ok(())
    }

    /// Store `v` at (i, j).
    ///
    /// # Safety
    /// (i, j) is inside the matrix and no other thread writes it.
    #[inline(always)]
    unsafe fn put(&self, i: usize, j: usize, v: f64) {
        // SAFETY: per the caller.
        unsafe {
            match self {
                EmuOut::F64(c) => *c.at(i, j) = v,
                EmuOut::F32(c) => *c.at(i, j) = v as f32,
            }
        }
    }

    /// Store `src` at (i, j), (i, j + 1), ...: a copy into a float32 row whose
    /// columns are contiguous, else value by value.
    ///
    /// # Safety
    /// (i, j + src.len() - 1) is inside the matrix and no other thread writes those.
    #[inline(always)]
    unsafe fn put_run32(&self, i: usize, j: usize, src: &[f32]) {
        // SAFETY: per the caller.
        unsafe {
            match self {
                EmuOut::F32(c) if c.cs == 1 => std::ptr::copy_nonoverlapping(src.as_ptr(), c.at(i, j), src.len()),
                _ => src.iter().enumerate().for_each(|(l, &v)| self.put(i, j + l, v as f64)),
            }
        }
    }

    /// Store `src` at (i, j), (i, j + 1), ..., each value plus 0 with `nz` (a
    /// -0 stored as +0: formats without -0), into a row whose columns are
    /// contiguous by a loop that vectorizes, else value by value.
    ///
    /// # Safety
    /// As [`EmuOut::put_run32`].
    #[inline(always)]
    unsafe fn put_run64(&self, i: usize, j: usize, src: &[f64], nz: bool) {
        let z = |v: f64| if nz { v + 0.0 } else { v };
        // SAFETY: per the caller.
        unsafe {
            match self {
                EmuOut::F32(c) if c.cs == 1 => {
                    let d = std::slice::from_raw_parts_mut(c.at(i, j), src.len());
                    d.iter_mut().zip(src).for_each(|(x, &v)| *x = z(v) as f32);
                }
                EmuOut::F64(c) if c.cs == 1 => {
                    let d = std::slice::from_raw_parts_mut(c.at(i, j), src.len());
                    d.iter_mut().zip(src).for_each(|(x, &v)| *x = z(v));
                }
                _ => src.iter().enumerate().for_each(|(l, &v)| self.put(i, j + l, z(v))),
            }
        }
    }

    /// The leading `rows x cols` block of the same matrix.
    fn block(&self, rows: usize, cols: usize) -> Self {
        match self {
            EmuOut::F64(c) => EmuOut::F64(OutMat { rows, cols, ..*c }),
            EmuOut::F32(c) => EmuOut::F32(OutMat { rows, cols, ..*c }),
        }
    }

    /// Copy row 0 into every other row (`rows`), or column 0 into every other column.
    fn spread(&self, rows: bool) {
        fn go<T: Copy>(c: &OutMat<T>, rows: bool) {
            for i in 0..c.rows {
                for j in 0..c.cols {
                    if (rows && i > 0) || (!rows && j > 0) {
                        let (i0, j0) = if rows { (0, j) } else { (i, 0) };
                        // SAFETY: both elements are inside the matrix, which this thread owns.
                        unsafe { *c.at(i, j) = *c.at(i0, j0) };
                    }
                }
            }
        }
        match self {
            EmuOut::F64(c) => go(c, rows),
            EmuOut::F32(c) => go(c, rows),
        }
    }
}

/// `c = a @ b` with every add rounded as `spec` says.
pub fn matmul_emulated(a: &Operand, b: &Operand, c: impl Into<EmuOut>, spec: &AccumSpec) -> Result<()> {
    let c = c.into();
    let (rows, cols) = c.shape();
    super::check_shapes(a, b, rows, cols)?;
    c.check(spec)?;
    let (fa, fb) = (a.format(), b.format());
    match (fa, fb) {
        (Some(x), Some(y)) if products_exact(&x, &y) => run(a, b, c, spec),
        _ => run_wide(a, b, c, spec),
    }
}

/// [`matmul_emulated`] of operands whose products need not be exact in f64
/// (float64 and posit32 values): row by row, every add `round(acc + a*b)` of
/// the exact sum ([`WideAdd`]), with the random bits and chunk totals of the
/// other paths ([`drive`]): operands whose products are exact give their bits.
fn run_wide(a: &Operand, b: &Operand, c: EmuOut, spec: &AccumSpec) -> Result<()> {
    if let Some((0, _)) = spec.chunk {
        return Err(Error::value("chunk: must be a positive integer"));
    }
    let outer = chunk_rounder(spec)?;
    let wide = WideAdd::new(spec.fmt, spec.opts)?;
    let (m, n, k) = (a.rows, b.cols, a.cols);
    if m == 0 || n == 0 {
        return Ok(());
    }
    let stochastic = spec.opts.mode == Mode::Stochastic;
    let rbits = spec.opts.rbits;
    let chunk = spec.chunk.map_or(usize::MAX, |(cs, _)| cs);
    let nchunks = if outer.is_some() { k.div_ceil(chunk) } else { 0 };
    let steps = (k + nchunks) as u64;
    let words = StepRand::new(spec.opts.key, steps);
    let rng2 = Rng::new(chunk_opts(spec.opts).key);
    let (inner_nz, final_nz) = (no_neg_zero(&spec.fmt), spec.chunk.map_or(no_neg_zero(&spec.fmt), |(_, f2)| no_neg_zero(&f2)));
    let task = |i: usize| {
        let (mut acc, mut tot, mut brow) = (vec![0f64; n], vec![0f64; n], vec![0f64; n]);
        for p in 0..k {
            // SAFETY: (i, p) is inside a, (p, j) inside b.
            let av = super::kernels::Real::quiet(unsafe { a.get_f64(i, p) });
            for (j, x) in brow.iter_mut().enumerate() {
                *x = super::kernels::Real::quiet(unsafe { b.get_f64(p, j) });
            }
            for (j, (x, &bv)) in acc.iter_mut().zip(&brow).enumerate() {
                let rd = if stochastic { words.bits(i, j, p, rbits) } else { 0 };
                *x = wide.fma(*x, av, bv, rd);
            }
            if let Some(o) = &outer {
                if (p + 1) % chunk == 0 || p + 1 == k {
                    let t = (k + p / chunk) as u64;
                    for (j, (x, y)) in acc.iter_mut().zip(tot.iter_mut()).enumerate() {
                        let e = (i * n + j) as u64;
                        let rd = if stochastic { rng2.bits(e.wrapping_mul(steps).wrapping_add(t), rbits) } else { 0 };
                        *y = o.add(*y, if inner_nz { *x + 0.0 } else { *x }, rd);
                        *x = 0.0;
                    }
                }
            }
        }
        let res = if outer.is_some() { &tot } else { &acc };
        // SAFETY: row i of c is written by this task only.
        unsafe { c.put_run64(i, 0, res, final_nz) };
    };
    parallel::for_each_item(m, &task);
    Ok(())
}

/// `round(acc + a*b)` of the exact value for any f64 operands: where the
/// product is exact in f64, the rounder's two-term sum; else the exact sum
/// (integers: the product's 106 bits and the accumulator's 53, aligned with a
/// sticky bit) rounded to odd at float64's 53 bits and then into the format
/// (which has at most 51: exact for every deterministic mode; stochastic
/// rounding then decides with the remainder's bits down to float64's 53 and
/// a sticky bit), or into float64 itself directly from the integers.
struct WideAdd {
    r: Dyn,
    f64_acc: Option<F64Acc>,
    stochastic: bool,
}

impl WideAdd {
    fn new(fmt: Format, opts: RoundOpts) -> Result<WideAdd> {
        let f64_acc = (fmt == Format::Float(named::FLOAT64)).then(|| F64Acc::new(&opts));
        // Rounding to odd at float64's 2^-1074 leaves two bits below a last bit of
        // 2^-1072 or more, as the second rounding needs.
        let finest = profile(&fmt).1;
        if f64_acc.is_none() && finest < -1072 {
            return Err(Error::value(format!(
                "accumulate: the format's smallest value is 2^{finest}, finer than 2^-1072, and sums of float64 and posit32 \
                 operands cannot be rounded into it exactly; accepted: formats whose smallest value is at least 2^-1072, or float64"
            )));
        }
        Ok(WideAdd { r: Dyn::new(fmt, opts)?, f64_acc, stochastic: opts.mode == Mode::Stochastic })
    }

    #[inline]
    fn fma(&self, acc: f64, a: f64, b: f64, rand: u64) -> f64 {
        let p = a * b;
        if !acc.is_finite() {
            // (inf or NaN stays: plus a finite product, or the product's own inf or NaN.)
            let q = if a.is_finite() && b.is_finite() { 0.0 } else { p };
            return self.r.add(acc, q, rand);
        }
        if !a.is_finite() || !b.is_finite() || a == 0.0 || b == 0.0 {
            return self.r.add(acc, p, rand);
        }
        // The FMA's residual is exact while the product stays clear of underflow.
        if p.is_finite() && p.abs() >= pow2(-969) && a.mul_add(b, -p) == 0.0 {
            return self.r.add(acc, p, rand);
        }
        self.exact(acc, a, b, rand)
    }

    /// The rare case: the product not exact in f64 (or near its range's ends).
    #[cold]
    fn exact(&self, acc: f64, a: f64, b: f64, rand: u64) -> f64 {
        let (na, ma, ea) = parts(a);
        let (nb, mb, eb) = parts(b);
        let p = (ma as u128 * mb as u128, ea + eb, na != nb);
        let (nc, mc, ec) = parts(acc);
        let Some((neg, m, e, sticky)) = exact_sum(p, (mc as u128, ec, nc)) else {
            // An exact zero (a tiny product exactly -acc): +0, as every path's.
            return self.r.add(0.0, 0.0, rand);
        };
        match &self.f64_acc {
            Some(f) => f.round_parts(neg, m, e, sticky, rand),
            None => self.r.add(odd53(neg, m, e, sticky, self.stochastic), 0.0, rand),
        }
    }
}

/// A finite f64 as (negative, integer significand, exponent of its last bit).
#[inline]
fn parts(x: f64) -> (bool, u64, i32) {
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    let (m, e) = if exp == 0 { (frac, -1074) } else { (frac | 1 << 52, exp - 1075) };
    (bits >> 63 == 1, m, e)
}

/// `m * 2^e` moved so that its top bit is bit 125 (m > 0).
#[inline]
fn top125(m: u128, e: i32) -> (u128, i32) {
    let s = m.leading_zeros() as i32 - 2;
    if s >= 0 {
        (m << s, e - s)
    } else {
        (m >> -s, e - s) // (never: significands of at most 106 bits)
    }
}

/// The exact sum of two signed values `m * 2^e` (significands below 2^106) as
/// (negative, M, E, sticky): |sum| = (M + f) * 2^E with 0 < f < 1 when
/// `sticky`, else f = 0; None when it is exactly zero.
fn exact_sum(x: (u128, i32, bool), y: (u128, i32, bool)) -> Option<(bool, u128, i32, bool)> {
    let norm = |(m, e, n): (u128, i32, bool)| (m != 0).then(|| { let (m, e) = top125(m, e); (m, e, n) });
    let (x, y) = match (norm(x), norm(y)) {
        (None, None) => return None,
        (Some((m, e, n)), None) | (None, Some((m, e, n))) => return Some((n, m, e, false)),
        (Some(x), Some(y)) => (x, y),
    };
    // The larger magnitude first (tops aligned: by exponent, then significand).
    let (big, small) = if (x.1, x.0) >= (y.1, y.0) { (x, y) } else { (y, x) };
    let d = (big.1 - small.1) as u32;
    let (sm, sticky) = if d >= 127 { (0, true) } else { (small.0 >> d, d > 0 && small.0 & ((1u128 << d) - 1) != 0) };
    let m = if big.2 == small.2 {
        big.0 + sm
    } else {
        // (With a sticky remainder the small value is more than sm: one less, and
        // the remainder 1 - f, still strictly between 0 and 1.)
        big.0 - sm - sticky as u128
    };
    if m == 0 && !sticky {
        return None;
    }
    Some((big.2, m, big.1, sticky))
}

/// `(M + f) * 2^E` (signed; see [`exact_sum`]) rounded to odd at float64's 53
/// bits (at 2^-1074 in its subnormal range); at 2^1024 and beyond, the largest
/// float64 (beyond every narrower format's rounding threshold, as [`Generic`]),
/// or for stochastic rounding infinity (past every format's last gap).
fn odd53(neg: bool, m: u128, e: i32, sticky: bool, stochastic: bool) -> f64 {
    let top = e + 127 - m.leading_zeros() as i32; // the top bit's exponent
    let v = if top >= 1024 {
        if stochastic { f64::INFINITY } else { f64::MAX }
    } else {
        let g = (top - 52).max(-1074);
        let shift = g - e;
        let q = if shift <= 0 {
            (m << -shift) as u64 // (exact: at most 53 bits)
        } else {
            let (q, rest) = if shift >= 128 { (0, m != 0) } else { (m >> shift, m & ((1u128 << shift) - 1) != 0) };
            q as u64 | (rest || sticky) as u64
        };
        q as f64 * pow2(g)
    };
    if neg { -v } else { v }
}

impl F64Acc {
    /// `(M + f) * 2^E` (signed; see [`exact_sum`]) rounded to float64 in the
    /// mode, as [`F64Acc::add`] rounds (stochastic: up when the random bits are
    /// below the remainder's top `rbits` bits).
    fn round_parts(&self, neg: bool, m: u128, e: i32, sticky: bool, rand: u64) -> f64 {
        let top = e + 127 - m.leading_zeros() as i32;
        if top >= 1024 {
            // At least 2^1024: past the last gap too.
            return self.past_max(neg, true);
        }
        let g = (top - 52).max(-1074);
        let shift = g - e;
        let (q, up) = if shift <= 0 {
            ((m << -shift) as u64, false) // (exact; never with a sticky remainder)
        } else {
            let (q, r) = if shift >= 128 { (0, m) } else { (m >> shift, m & ((1u128 << shift) - 1)) };
            let q = q as u64;
            let inexact = r != 0 || sticky;
            // r + f against half the gap, 2^(shift - 1) (beyond every r past 2^128); f
            // only breaks ties.
            let half = (shift <= 128).then(|| 1u128 << (shift - 1));
            let above_half = half.is_some_and(|h| r > h || (r == h && sticky));
            let at_half = half.is_some_and(|h| r == h && !sticky);
            let up = match self.mode {
                Mode::NearestEven => above_half || (at_half && q & 1 == 1),
                Mode::NearestAway => above_half || at_half,
                Mode::TowardZero => false,
                Mode::Up => !neg && inexact,
                Mode::Down => neg && inexact,
                Mode::Odd => q & 1 == 0 && inexact,
                Mode::Stochastic => {
                    // floor((r + f) * 2^rbits / 2^shift): f never changes it when
                    // shift >= rbits (always so with a sticky remainder).
                    let sh = shift - self.rbits as i32;
                    let top_bits = if sh >= 128 {
                        0
                    } else if sh >= 0 {
                        r >> sh
                    } else {
                        r << -sh
                    };
                    (rand as u128) < top_bits
                }
            };
            (q, up)
        };
        let v = (q + up as u64) as f64 * pow2(g);
        if neg { -v } else { v }
    }
}

/// Column sums `out[0, j] = sum_k x[k, j]`, every add rounded as `spec` says.
pub fn sum_emulated(x: &Operand, c: impl Into<EmuOut>, spec: &AccumSpec) -> Result<()> {
    let c = c.into();
    // With 4 columns or more, 1.0 as an E4M3FN code: a format of few bits, so
    // that the f32 tile kernels ([`kind16`]) take the sums their inputs allow.
    // Fewer columns would leave most of their 16-column strips empty: 1.0 as an
    // f64 there, for the f64 path.
    static ONE8: u8 = 0x38;
    static ONE64: f64 = 1.0;
    // SAFETY: a 1 x k view with zero strides of one static value.
    let ones = unsafe {
        if x.cols >= 4 {
            Operand::from_raw(&ONE8, super::Storage::U8, Some(Format::Float(named::FLOAT8_E4M3FN)), 1, x.rows, 0, 0, "x")?
        } else {
            Operand::from_raw(&ONE64 as *const f64 as *const u8, super::Storage::F64, None, 1, x.rows, 0, 0, "x")?
        }
    };
    let (rows, cols) = c.shape();
    if rows != 1 || cols != x.cols {
        return Err(Error::value(format!("out: shape {rows}x{cols} must be 1x{}", x.cols)));
    }
    c.check(spec)?;
    if x.cols < 4 && sum_native(x, &c, spec) {
        return Ok(());
    }
    // 1 * x is exact for any input.
    run(&ones, x, c, spec)
}

/// The sums of [`sum_emulated`] with the hardware's adds, where they are its
/// roundings: into float32 or float64, nearest-even, no saturation and no
/// chunks, every value exact in the accumulator's format (a float32
/// accumulator checks float64 inputs value by value). One add is then the
/// exact sum rounded once, so a chain of them in index order is the emulation,
/// at the adds' latency instead of the tiles' (whose lanes span columns: a
/// column or two leaves them empty). Returns whether it summed.
fn sum_native(x: &Operand, c: &EmuOut, spec: &AccumSpec) -> bool {
    let o = &spec.opts;
    if spec.chunk.is_some() || o.mode != Mode::NearestEven || o.saturate {
        return false;
    }
    let f32_acc = match spec.fmt {
        Format::Float(f) if f == named::FLOAT32 => true,
        Format::Float(f) if f == named::FLOAT64 => false,
        _ => return false,
    };
    let (rows, cols) = (x.rows, x.cols);
    // SAFETY (every get_f64 below): i < rows, j < cols.
    if f32_acc && !x.fits_f32() {
        let exact = |v: f64| v.is_nan() || v as f32 as f64 == v;
        if !(0..cols).all(|j| (0..rows).all(|i| exact(unsafe { x.get_f64(i, j) }))) {
            return false;
        }
    }
    /// The chain over column `j`, `get` reading element i (each storage its own
    /// loop, the decoding's branch out of it).
    #[inline(always)]
    fn chain(rows: usize, f32_acc: bool, get: impl Fn(usize) -> f64) -> f64 {
        if f32_acc {
            (0..rows).fold(0f32, |acc, i| acc + get(i) as f32) as f64
        } else {
            (0..rows).fold(0f64, |acc, i| acc + get(i))
        }
    }
    use super::Dec;
    for j in 0..cols {
        let p = x.ptr.wrapping_offset(j as isize * x.cs * x.storage.bytes() as isize);
        let rs = x.rs;
        // SAFETY (each read): element (i, j) of the operand, i < rows.
        let total = unsafe {
            match &x.dec {
                Dec::F32 => chain(rows, f32_acc, |i| *(p as *const f32).offset(i as isize * rs) as f64),
                Dec::F64 => chain(rows, f32_acc, |i| *(p as *const f64).offset(i as isize * rs)),
                Dec::Bf16 => chain(rows, f32_acc, |i| f32::from_bits((*(p as *const u16).offset(i as isize * rs) as u32) << 16) as f64),
                Dec::Lut8(t) => chain(rows, f32_acc, |i| *t.get_unchecked(*p.offset(i as isize * rs) as usize) as f64),
                _ => chain(rows, f32_acc, |i| x.get_f64(i, j)),
            }
        };
        // SAFETY: the output is 1 x cols (checked by the caller), written by this thread only.
        unsafe { c.put(0, j, total) };
    }
    true
}

/// The rounding options of chunk totals: those of the products' adds with a
/// distinct random stream (their step indices differ anyway).
fn chunk_opts(opts: RoundOpts) -> RoundOpts {
    let mut o2 = opts;
    o2.key.c ^= 0x5bd1_e995;
    o2
}

/// The rounder of chunk totals into `chunk_accumulate`, if chunks are asked for.
fn chunk_rounder(spec: &AccumSpec) -> Result<Option<Dyn>> {
    spec.chunk.map(|(_, f2)| Dyn::new(f2, chunk_opts(spec.opts))).transpose()
}

fn run(a: &Operand, b: &Operand, c: EmuOut, spec: &AccumSpec) -> Result<()> {
    if let Some((cs, _)) = spec.chunk {
        if cs == 0 {
            return Err(Error::value("chunk: must be a positive integer"));
        }
    }
    // Broadcast operands (numpy's stride-0 views): every column of B the same
    // column, or every row of A the same row. With deterministic rounding each
    // such column (row) of C meets the same adds, so one is computed and copied;
    // stochastic rounding draws other bits for each element, so it runs in full.
    if spec.opts.mode != Mode::Stochastic {
        if b.cols > 1 && b.cs == 0 {
            let b1 = Operand { cols: 1, cs: 1, ..b.clone() };
            let (rows, _) = c.shape();
            run(a, &b1, c.block(rows, 1), spec)?;
            c.spread(false);
            return Ok(());
        }
        if a.rows > 1 && a.rs == 0 {
            let a1 = Operand { rows: 1, ..a.clone() };
            let (_, cols) = c.shape();
            run(&a1, b, c.block(1, cols), spec)?;
            c.spread(true);
            return Ok(());
        }
    }
    // One column of B against several rows of A (a matrix-vector product): the
    // tiles span 8 or 16 columns, which one column would leave as padding, so the
    // product runs as c^T = b^T a^T, one row of A against C's rows as columns.
    // Each element meets the same adds in the same order and, with the words of
    // rows and columns trading places ([`StepRand::transposed`]), draws the same
    // bits; the chunk totals' key, row * n + column, is the row's index either way.
    if b.cols == 1 && a.rows > 1 {
        return run_as(&b.t(), &a.t(), c.t(), spec, true);
    }
    run_as(a, b, c, spec, false)
}

/// [`run`]'s product as given, `tr` when it is the transposed one (its words
/// trade places).
fn run_as(a: &Operand, b: &Operand, c: EmuOut, spec: &AccumSpec, tr: bool) -> Result<()> {
    let outer = chunk_rounder(spec)?;
    let fmt = spec.fmt;
    let opts = spec.opts;
    // Validate the inner format (and get the errors right) before dispatching.
    Dyn::new(fmt, opts)?;
    if fmt == Format::Float(named::FLOAT64) {
        return drive(&F64Acc::new(&opts), a, b, c, spec, outer.as_ref(), tr);
    }
    if !fast_ok(&fmt) {
        return drive(&Generic { fmt, opts }, a, b, c, spec, outer.as_ref(), tr);
    }
    // float32 operands whose values all belong to a narrower format, as its codes:
    // the kernels then see the bits their products really have (float32 x float32
    // products leave only the f64 lanes). The directed modes' tiles take any
    // float32 inputs as they are.
    let directed = matches!(opts.mode, Mode::TowardZero | Mode::Up | Mode::Down);
    let (na, nb) = if directed { (None, None) } else { (super::narrow::narrowed(a), super::narrow::narrowed(b)) };
    let (a, b) = (na.as_ref().map_or(a, |n| &n.op), nb.as_ref().map_or(b, |n| &n.op));
    #[cfg(target_arch = "x86_64")]
    if let Some((kind, bf)) = kind16(&fmt, &opts, a, b) {
        // Stochastic with more bits than the float32 tiles decide with (float8 E4M3
        // products), on up to 4 rows: the f64 few-row kernel ([`sr64_rows`]), the
        // same bits, 2.5-3x as fast on one row and as fast on four into bfloat16
        // (1.5x into float16, whose float32 tiles redo more); the float32 tiles win
        // from 6 rows on.
        let wide_few = kind == Kind16::Sr && sr_fmt(&fmt).is_some_and(|f| opts.rbits > f.unit) && a.rows <= 4 && b.cols > 1;
        // (With wide bits it may give the product up: then the f64 tiles below.)
        if !wide_few && drive16(kind, bf, a, b, c, spec, outer.as_ref(), tr)? {
            return Ok(());
        }
    }
    by_mode!(mode_code(opts.mode), C => drive(&Fast::<C>::new(fmt, opts), a, b, c, spec, outer.as_ref(), tr))
}

/// The fp8 formats whose products feed [`Kind16::Fma`]: for every pair of
/// them, `RN(fl32(acc + a*b)) == RN(acc + a*b)` for every float16 or bfloat16
/// `acc` (checked exhaustively by the tests).
pub(crate) const FMA16_INPUTS: [crate::format::FloatFormat; 5] =
    [named::FLOAT8_E5M2, named::FLOAT8_E4M3FN, named::FLOAT8_E4M3, named::FLOAT8_E4M3FNUZ, named::FLOAT8_E5M2FNUZ];

/// How the 8-lane f32 tile kernel computes one add into float16 or bfloat16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind16 {
    /// Nearest-even, the rounding of `fma(a, b, acc)`: products of at most 8 bits, exact in f32;
    /// the double rounding f32 -> fp16 is innocuous (the exact sum of two
    /// 11-bit numbers rounded to 24 >= 2*11 + 1 bits, then to 11 bits); the
    /// same for bfloat16 (8-bit operands).
    Fma,
    /// `Fma`'s sum, rounded by Veltkamp's split instead: `t = s * (2^q + 1)`,
    /// `s' = t - (t - s)` is `s` rounded to nearest-even at `24 - q` bits (q = 13:
    /// float16's 11, q = 16: bfloat16's 8), three float operations where the
    /// conversions cost more. It holds for normal `s` whose `t` stays finite, so
    /// a depth block runs it only when its values show ([`split_ok`]) that no sum
    /// can overflow the format (or f32 in `t`), none meets inf, and every sum in
    /// the format's subnormal range is exact there (products on its grid);
    /// other blocks run `Fma`. Into a [`split_fmt`] format (FloatFormat(6, 9):
    /// q = 14) from products of at most its precision (2 * 11 + 1 <= 24 keeps the
    /// double rounding innocuous), the other blocks run the f64 rounding.
    Split,
    /// Nearest-even into an [`split_fmt`] format (float8_e5m2) from products
    /// of at most 8 bits that leave its grid, on values scaled by
    /// [`unit_scale`] (A's block and the tile): the FMA's sum `s`, then the
    /// pattern plus 2^(u-1) - 1 plus its bit u, truncated below bit u, the
    /// format's unit in every scaled pattern, subnormals included
    /// ([`tile16_unit`]). Below the scaled smallest normal the FMA rounds at
    /// 2^-149, which holds every sum while the products' last bits do
    /// (checked per block). In the normal range the FMA's rounding is innocuous when every
    /// product is below `2^(sub + 23)` (`sub`: the exponent of the smallest
    /// subnormal): a sum exceeds 24 bits only when a product lies more than
    /// 15 binades below the accumulator, far from every midpoint of a format
    /// of at most 11 bits, or when a product above 2^(sub + 23) meets an
    /// accumulator's last bit at 2^sub. Depth blocks whose values could pass
    /// that bound or the largest value run the f64 rounding; chunk totals (two
    /// values of the format) take [`flush_split`].
    UnitNe,
    /// Nearest-even: the sum rounded to odd at 24 bits ([`tile16_oddz`];
    /// products exact in f32, checked per depth block from the values), then
    /// rounded into the format.
    Odd,
    /// `Odd` into float16 on a depth block whose accumulators are finite and
    /// whose sums stay below float16's overflow threshold ([`near_ok`]): the
    /// same rounding with its sticky bit taken in two operations instead of
    /// three ([`tile16_oddz`] with [`ODD_F16_FIN`]). Chosen per block by
    /// [`drive16`] where `kind16` gives `Odd` into float16.
    OddFin,
    /// Nearest-even, products exact in f32 as for `Odd`: the FMA's sum s, then
    /// the rounding, except for vectors where a lane's s sits on a midpoint of
    /// the format (bf16: exactly, the low 16 bits 0x8000; fp16: or could, the
    /// low 12 bits zero, which also covers the midpoints of its subnormal
    /// range, and s differs from the accumulator); those take the `Odd`
    /// computation. Only there can rounding s differ from rounding the exact
    /// sum: s is the exact sum rounded to 24 bits, and every midpoint of the
    /// format is an f32, so the first rounding
    /// can reach one but never cross it; when s equals the accumulator the
    /// product was below half an f32 unit of it, far from any midpoint.
    Mid,
    /// Nearest-even into float8_e5m2, products exact in f32 as for `Odd`: the
    /// sum rounded to odd at 24 bits, then at 11 (float16), then rounded.
    OddE5m2,
    /// Nearest-even into an [`split_fmt`] format from products of more bits
    /// than `UnitNe` takes (bf16 and fp16 inputs), on values scaled by
    /// [`unit_scale`]: the sum rounded to odd at 24 bits (or at 2^-149, below the
    /// scaled smallest normal) as [`tile16_oddz`] does, then the integer
    /// nearest-even rounding at the unit bit ([`tile16_unit`] with `ODD`). Depth blocks
    /// whose scaled products are not all exact f32 values (unless the input
    /// formats' products cannot lose a sticky bit that decides: [`tails_harmless`],
    /// float16 or bfloat16 into float8_e5m2), or whose sums could
    /// pass the largest value, run `OddE5m2` (float8_e5m2, when its own
    /// condition holds) or the f64 rounding; chunk totals take [`flush_split`].
    OddUnit,
    /// Toward zero, up or down into float16, bfloat16, float32 or float8_e5m2: the FMA
    /// rounded in the mode itself ([`tile16_dir`]), for any inputs whose values
    /// are f32.
    Dir(DirTo),
    /// Stochastic into float16, bfloat16 or another IEEE-style format whose
    /// normal range f32 holds ([`sr_fmt`]), with `rbits` at most the bits f32
    /// keeps below the format's unit (`23 - man`: 13 for float16, 16 for
    /// bfloat16), on values scaled by [`unit_scale`] ([`tile16_sr`]): the FMA
    /// toward zero is the exact sum truncated to 24 bits (or at 2^-149, below
    /// the scaled smallest normal), whose bits below the unit decide as the
    /// f64 path's `rbits` top bits of the remainder do. Depth blocks whose
    /// values could take a sum past the largest value run in runs checked at
    /// their starts, then watch their sums ([`sr_watched`]); blocks whose A
    /// values do not scale exactly, or whose sums could come near f32's
    /// overflow, run the f64 rounding.
    ///
    /// With more bits (wide bits, up to 32, the default) from float8 E4M3
    /// products ([`sr_kind`]): the kernel decides with the top `23 - man`, as
    /// all of them decide unless those equal the remainder's top bits and the
    /// f32 sum is inexact. A tile whose FMAs were all exact (MXCSR's precision
    /// flag, read after the kernel) is the f64 path's; another is redone on
    /// f64 lanes ([`Dyn::sr_tile64`]); past a quarter of a task's tiles so
    /// redone (after 8), the whole product goes to the f64 tiles ([`drive`]),
    /// which give the same bits. Chunk totals redo the lanes whose top bits tie
    /// ([`flush_sr`] with `ties`).
    Sr,
}

/// [`Kind16`] as the const parameter of the kernels.
const K_FMA: u8 = 0;
const K_ODD: u8 = 1;
const K_MID: u8 = 2;
const K_SPLIT: u8 = 3;

/// Is `fmt` IEEE float16 with nearest-even, non-saturating rounding (what F16C's
/// `vcvtps2ph` does to nearest, IEEE overflow included)?
fn is_f16_ne(fmt: &Format, opts: &RoundOpts) -> bool {
    *fmt == Format::Float(named::FLOAT16) && opts.mode == Mode::NearestEven && !opts.saturate
}

/// The `vcvtps2ph` rounding control of a mode (nearest-even, toward zero, up or down).
#[cfg(target_arch = "x86_64")]
fn f16_rounding(mode: Mode) -> i32 {
    use std::arch::x86_64::*;
    match mode {
        Mode::TowardZero => _MM_FROUND_TO_ZERO,
        Mode::Up => _MM_FROUND_TO_POS_INF,
        Mode::Down => _MM_FROUND_TO_NEG_INF,
        _ => _MM_FROUND_TO_NEAREST_INT,
    }
}

/// `$body` with the const `$c` set to the `vcvtps2ph` rounding control `$rm`
/// (one of [`f16_rounding`]'s), so that `$body` can pass it as a const parameter.
#[cfg(target_arch = "x86_64")]
macro_rules! by_f16_rounding {
    ($rm:expr, $c:ident => $body:expr) => {{
        use std::arch::x86_64::{_MM_FROUND_TO_NEAREST_INT, _MM_FROUND_TO_NEG_INF, _MM_FROUND_TO_POS_INF, _MM_FROUND_TO_ZERO};
        by_const!($rm, $c: i32, [_MM_FROUND_TO_ZERO, _MM_FROUND_TO_POS_INF, _MM_FROUND_TO_NEG_INF], _MM_FROUND_TO_NEAREST_INT => $body)
    }};
}

/// Is `fmt` bfloat16 with nearest-even, non-saturating rounding (the integer
/// round-to-nearest-even of an f32's top 16 bits, overflow to infinity included)?
fn is_bf16_ne(fmt: &Format, opts: &RoundOpts) -> bool {
    *fmt == Format::Float(named::BFLOAT16) && opts.mode == Mode::NearestEven && !opts.saturate
}

/// Which tile kernel (if any) runs `fmt` accumulation of `a @ b`, and whether
/// it rounds into bfloat16 (else float16).
pub(crate) fn kind16(fmt: &Format, opts: &RoundOpts, a: &Operand, b: &Operand) -> Option<(Kind16, bool)> {
    if !super::simd() {
        return None;
    }
    let (Some(fa), Some(fb)) = (a.format(), b.format()) else { return None };
    if let Some(to) = dir_to(fmt, opts) {
        // float16 and float8_e5m2 too take the integer rounding at their unit (bit 13,
        // bit 21; toward zero one `and`, where `vcvtps2ph` and back take four), on
        // values scaled by [`unit_scale`]; their depth blocks that cannot be scaled take
        // the conversions.
        let to = match to {
            DirTo::F16 => DirTo::Unit(13),
            DirTo::E5m2 => DirTo::Unit(21),
            to => to,
        };
        // Other `Unit` formats run the f64 rounding where a block fails its bound,
        // which up and down fail in every block with few bits ([`bound_room`]).
        let other = matches!(to, DirTo::Unit(_)) && !matches!(fmt, Format::Float(f) if *f == named::FLOAT16 || *f == named::FLOAT8_E5M2);
        let room = opts.mode == Mode::TowardZero || sr_fmt(fmt).is_some_and(|f| bound_room(f.prec));
        return (a.fits_f32() && b.fits_f32() && (!other || room)).then_some((Kind16::Dir(to), to == DirTo::Bf16));
    }
    if opts.mode == Mode::Stochastic {
        return sr_kind(fmt, opts, &fa, &fb, a.fits_f32() && b.fits_f32());
    }
    let (pa, _, _) = profile(&fa);
    let (pb, _, _) = profile(&fb);
    // Products of at most 24 bits (their exponents are checked per depth block).
    let fit24 = pa + pb <= 24 && a.fits_f32() && b.fits_f32();
    let bf = is_bf16_ne(fmt, opts);
    if !(bf || is_f16_ne(fmt, opts)) {
        // Nearest-even into another IEEE-style format of at most 11 bits
        // ([`split_fmt`]) from products of no more bits than it has, on its grid:
        // the FMA's double rounding is innocuous (24 >= 2 * 11 + 1), then the split.
        let f = split_fmt(fmt, opts)?;
        let grid = value_bounds(&fa).0 + value_bounds(&fb).0 >= f.sub;
        if fit24 && pa + pb <= f.prec && grid {
            return Some((Kind16::Split, false));
        }
        // Off its grid, products of at most 8 bits below 2^(sub + 23) (float8_e5m2: 2^7).
        if fit24 && pa + pb <= 8 && f.sub + 23 >= 4 {
            return Some((Kind16::UnitNe, false));
        }
        // Products of more bits (bf16, fp16 inputs): rounded to odd at 24 bits first.
        return fit24.then_some((Kind16::OddUnit, false));
    }
    // From here on: nearest-even into float16 or bfloat16.
    if let (Format::Float(x), Format::Float(y)) = (fa, fb) {
        if FMA16_INPUTS.contains(&x) && FMA16_INPUTS.contains(&y) {
            return Some((Kind16::Split, bf));
        }
    }
    // Products of few bits (bfloat16 x bfloat16: 16) leave the low bits of many
    // f32 sums zero, on a midpoint or near one, so `Mid` would take its fallback
    // often: `Odd` (round to odd from the FMA toward zero) is faster there. With
    // float16 products, `Mid` is the faster into bfloat16 (0.17x of the float32
    // path at n = 512, against 0.15x), and into float16 only for 2 to 12 rows
    // (B read in place: about 5%); `Odd` elsewhere (0.16x against 0.13x).
    let mid = pa + pb >= 20 && (bf || (2..=IN_PLACE_M).contains(&a.rows));
    let kind = if mid { Kind16::Mid } else { Kind16::Odd };
    fit24.then_some((kind, bf))
}

/// The format parameters of [`Kind16::Sr`]: the bit of its unit in the f32
/// pattern of a normal value (`23 - man`), its precision, its largest value and
/// the exponent of its smallest subnormal.
#[derive(Clone, Copy, Debug)]
struct SrFmt {
    unit: u32,
    prec: i32,
    max: f64,
    sub: i32,
}

/// [`SrFmt`] of a format [`Kind16::Sr`] can round into: IEEE-style (inf and
/// NaN as float16), with subnormals, a normal range inside f32's (so that the
/// unit of every normal value sits `23 - man` bits up its f32 pattern; below
/// the smallest normal, the format's subnormals and f32's meet at 2^-126 or
/// lie above it), and 2 to 10 mantissa bits (float16, bfloat16, float8_e5m2,
/// FloatFormat(6, 9) ...). Its smallest normal is at most 1 (a bias of at least
/// 1): the kernels scale by 2^[`unit_scale`], which must be a normal f32 whose
/// inverse is one.
fn sr_fmt(fmt: &Format) -> Option<SrFmt> {
    let Format::Float(f) = fmt else { return None };
    let ok = f.subnormals && f.inf && f.nan == crate::format::NanPolicy::Ieee && (2..=10).contains(&f.man_bits) && (-126..=0).contains(&f.emin()) && f.emax() <= 127;
    ok.then(|| SrFmt { unit: 23 - f.man_bits, prec: f.man_bits as i32 + 1, max: f.max_value(), sub: f.emin() - f.man_bits as i32 })
}

/// The format of [`Kind16::Split`] other than float16 and bfloat16: nearest-even,
/// not saturating, into an [`sr_fmt`] format whose smallest subnormal is an f32
/// normal (so that every nonzero sum on its grid is one, where Veltkamp's split
/// holds), such as FloatFormat(6, 9).
fn split_fmt(fmt: &Format, opts: &RoundOpts) -> Option<SrFmt> {
    let plain = opts.mode == Mode::NearestEven && !opts.saturate && !is_f16_ne(fmt, opts) && !is_bf16_ne(fmt, opts);
    sr_fmt(fmt).filter(|f| plain && f.sub >= -126)
}

/// Veltkamp's multiplier `2^q + 1` of [`Kind16::Split`] into a format of `prec`
/// bits: q = 24 - prec (float16 8193, bfloat16 65537, FloatFormat(6, 9) 16385);
/// `t = s * (2^q + 1)`, `t - (t - s)` is the normal f32 `s` rounded to
/// nearest-even at `prec` bits (checked by the tests for every q it is used with).
fn split_mult(prec: i32) -> f32 {
    (2f64.powi(24 - prec) + 1.0) as f32
}

/// [`kind16`] for stochastic rounding: [`Kind16::Sr`] into an [`sr_fmt`]
/// format (not saturating) with 1 to `23 - man` random bits, from inputs of at
/// most 11 bits whose values are f32 (`fits`). The FMA truncates any sum
/// exactly; on values scaled by [`unit_scale`] the truncation at the unit bit
/// of the pattern rounds at the format's unit in its subnormal range too, so
/// the products may have any bits. Depth blocks that fail the bound on the
/// sums (every block of a format of few bits such as float8_e5m2, where an add
/// can grow a sum by a quarter: [`bound_room`]) run [`sr_watched`]: runs checked
/// at their starts, then [`tile16_sr`] with `TRACK`.
fn sr_kind(fmt: &Format, opts: &RoundOpts, fa: &Format, fb: &Format, fits: bool) -> Option<(Kind16, bool)> {
    let sf = sr_fmt(fmt)?;
    let narrow = |f: &Format| matches!(f, Format::Float(x) if x.man_bits <= 10);
    // Wide bits (more than `unit`, up to 32) from products of at most 8 bits
    // whose last bits lie at or above 2^-20 (float8 E4M3 x E4M3), whose f32
    // sums are exact below 2^4 (2^24 times those last bits) and nearly always
    // above: products of more bits (bfloat16) or of smaller ones (float8_e5m2,
    // down to 2^-32) would send many tiles to the f64 lanes.
    let (ba, bb) = (profile(fa), profile(fb));
    let wide = opts.rbits > sf.unit && opts.rbits <= 32 && ba.0 + bb.0 <= 8 && ba.1 + bb.1 >= -20;
    (!opts.saturate && fits && narrow(fa) && narrow(fb) && ((1..=sf.unit).contains(&opts.rbits) || wide)).then_some((Kind16::Sr, false))
}

/// Bounds of a block of f32 values: (lowest exponent of any nonzero finite
/// value's last bit, for values of `prec` bits; bound `h` with |x| < 2^h for
/// every finite x). `None` when no value is nonzero and finite.
fn exp_bounds(v: &[f32], prec: i32) -> Option<(i32, i32)> {
    exp_bounds_max(v, prec).0
}

/// One pass over `v`: the smallest and the largest nonzero finite magnitude,
/// as f32 patterns (`u32::MAX`, 0 when there is none), and the largest
/// magnitude pattern of all (a NaN's when there is one). Bit patterns of
/// magnitudes order like the values; the loop vectorizes (integer minima and
/// maxima, no branches).
#[inline(always)]
fn mag_scan(v: &[f32]) -> (u32, u32, u32) {
    let (mut lo1, mut hi, mut top) = (u32::MAX, 0u32, 0u32);
    for &x in v {
        let m = x.to_bits() & 0x7fff_ffff;
        // Finite magnitudes (others as 0), less one: zero's wraps to the largest.
        let f = if m < 0x7f80_0000 { m } else { 0 };
        lo1 = lo1.min(f.wrapping_sub(1));
        hi = hi.max(f);
        top = top.max(m);
    }
    (lo1.wrapping_add(1) | u32::from(lo1 == u32::MAX).wrapping_neg(), hi, top)
}

/// [`exp_bounds`] and [`abs_max32`] of `v` in one pass ([`mag_scan`], with AVX2
/// where the CPU has it).
fn exp_bounds_max(v: &[f32], prec: i32) -> (Option<(i32, i32)>, f32) {
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn go(v: &[f32]) -> (u32, u32, u32) {
        mag_scan(v)
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: simd() holds only when avx2 was detected.
    let (lo, hi, top) = if super::simd() { unsafe { go(v) } } else { mag_scan(v) };
    #[cfg(not(target_arch = "x86_64"))]
    let (lo, hi, top) = mag_scan(v);
    (exp_bounds_of(lo, hi, prec), f32::from_bits(top))
}

/// The codes [`code_scan`] reads: 16-bit (bfloat16, float16) or 8-bit (float8).
trait ScanCode: Copy + Ord + std::ops::BitAnd<Output = Self> {
    /// The magnitude bits.
    const MAG: Self;
    const ZERO: Self;
    const MAX: Self;
    fn dec(self) -> Self;
    fn wide(self) -> u32;
}

macro_rules! scan_code {
    ($t:ty, $mag:expr) => {
        impl ScanCode for $t {
            const MAG: Self = $mag;
            const ZERO: Self = 0;
            const MAX: Self = <$t>::MAX;
            #[inline(always)]
            fn dec(self) -> Self {
                self.wrapping_sub(1)
            }
            #[inline(always)]
            fn wide(self) -> u32 {
                self as u32
            }
        }
    };
}
scan_code!(u16, 0x7fff);
scan_code!(u8, 0x7f);

/// [`mag_scan`] of the values of `rows` rows of `cols` codes from `p`, `ld`
/// codes apart (bfloat16 or float16 codes, or float8_e5m2 or float8_e4m3fn
/// ones), as f32 patterns: `pat(c)` of the magnitude codes, `inf` the first of
/// them past the finite ones (an infinity's or a NaN's). The codes' magnitudes
/// order as the values', so their minima and maxima are taken on the codes,
/// then converted.
///
/// # Safety
/// Those codes must be readable.
unsafe fn code_scan<T: ScanCode>(p: *const T, ld: isize, rows: usize, cols: usize, inf: T, pat: impl Fn(u32) -> u32) -> (u32, u32, u32) {
    #[inline(always)]
    unsafe fn body<T: ScanCode>(p: *const T, ld: isize, rows: usize, cols: usize, inf: T) -> (u32, u32, u32) {
        let (mut lo, mut hi, mut top) = (u32::MAX, T::ZERO, T::ZERO);
        for r in 0..rows {
            // Each row on pages of its own: the one eight rows on fetched line by line
            // (the hardware's prefetch stops at a page's end).
            #[cfg(target_arch = "x86_64")]
            if r + 8 < rows {
                let q = p.wrapping_offset((r + 8) as isize * ld) as *const i8;
                for l in (0..cols * std::mem::size_of::<T>()).step_by(64) {
                    // SAFETY: a prefetch reads nothing.
                    unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(q.wrapping_add(l)) };
                }
            }
            // SAFETY: row r's cols codes are readable (the caller's contract).
            let row = unsafe { std::slice::from_raw_parts(p.wrapping_offset(r as isize * ld), cols) };
            // As `mag_scan`, on the codes' magnitudes.
            let (mut lo1, mut h, mut t) = (T::MAX, T::ZERO, T::ZERO);
            for &c in row {
                let m = c & T::MAG;
                let f = if m < inf { m } else { T::ZERO };
                lo1 = lo1.min(f.dec());
                h = h.max(f);
                t = t.max(m);
            }
            // (lo1 + 1: the smallest nonzero finite magnitude, none where lo1 wrapped.)
            let l = if lo1 == T::MAX { u32::MAX } else { lo1.wide() + 1 };
            (lo, hi, top) = (lo.min(l), hi.max(h), top.max(t));
        }
        (lo, hi.wide(), top.wide())
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn go<T: ScanCode>(p: *const T, ld: isize, rows: usize, cols: usize, inf: T) -> (u32, u32, u32) {
        // SAFETY: per the caller.
        unsafe { body(p, ld, rows, cols, inf) }
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: simd() holds only when avx2 was detected; the rest per the caller.
    let (lo, hi, top) = if super::simd() { unsafe { go(p, ld, rows, cols, inf) } } else { unsafe { body(p, ld, rows, cols, inf) } };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: per the caller.
    let (lo, hi, top) = unsafe { body(p, ld, rows, cols, inf) };
    (if lo == u32::MAX { lo } else { pat(lo) }, pat(hi), pat(top))
}

/// [`code_scan`] of `rows` runs of `cols` elements of `b` from element `off`,
/// `ld` elements apart, for the decodings whose codes it reads (bfloat16,
/// float16, and float8_e5m2 and float8_e4m3fn by their table, where a NaN's
/// value is a NaN and an infinity's an infinity); `None` for the others.
///
/// # Safety
/// Those elements must be inside `b`.
unsafe fn operand_code_scan(b: &Operand, off: isize, ld: isize, rows: usize, cols: usize) -> Option<(u32, u32, u32)> {
    let p = b.ptr.wrapping_offset(off * b.storage.bytes() as isize);
    // SAFETY: the runs are inside b (the caller's contract), codes of its storage.
    unsafe {
        match (&b.dec, super::kernels::fp8_kind(b.format())) {
            (super::Dec::Bf16, _) => Some(code_scan(p as *const u16, ld, rows, cols, 0x7f80, |c| c << 16)),
            (super::Dec::F16, _) => Some(code_scan(p as *const u16, ld, rows, cols, 0x7c00, |c| super::f16_to_f32(c as u16).to_bits())),
            (super::Dec::Lut8(t), Some(f)) => {
                let inf = if f == super::kernels::FP8_E4M3FN { 0x7f } else { 0x7c };
                Some(code_scan(p, ld, rows, cols, inf, |c| t[c as usize].to_bits()))
            }
            _ => None,
        }
    }
}

/// [`exp_bounds`] from the smallest and largest nonzero finite magnitude
/// patterns ([`mag_scan`]).
fn exp_bounds_of(lo: u32, hi: u32, prec: i32) -> Option<(i32, i32)> {
    if hi == 0 {
        return None;
    }
    let be = (lo >> 23) as i32;
    // Subnormal f32 values have their last bit at 2^-149 at worst.
    let low = if be == 0 { -149 } else { (be - 127 - (prec - 1)).max(-149) };
    Some((low, (hi >> 23) as i32 - 127 + 1))
}

/// The largest magnitude in `v`, inf included; NaN when `v` holds a NaN (the
/// largest pattern of the magnitudes), which the bounds that read it refuse.
/// An integer maximum, which vectorizes.
#[inline(always)]
fn abs_max32_body(v: &[f32]) -> f32 {
    f32::from_bits(v.iter().map(|x| (x.to_bits() & 0x7fff_ffff) as i32).max().unwrap_or(0) as u32)
}

/// # Safety
/// The CPU must support avx2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn abs_max32_avx2(v: &[f32]) -> f32 {
    abs_max32_body(v)
}

/// [`abs_max32_body`], with AVX2 when the CPU has it.
fn abs_max32(v: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if super::simd() {
        // SAFETY: simd() holds only when avx2 was detected.
        return unsafe { abs_max32_avx2(v) };
    }
    abs_max32_body(v)
}

/// May a depth block of `kn` steps run [`Kind16::Split`] into a format of
/// `prec` bits whose sums must stay below `limit` (float16: its overflow
/// threshold 65520; bfloat16: 2^100, far below 2^128 / 65537, where `t`
/// overflows; a [`split_fmt`] format: its largest value) and whose smallest
/// subnormal is 2^sub? `acc_max` is the largest accumulator magnitude at its
/// start, `row_max` the largest sum of |a| over the block of any row of A,
/// `b_max` the largest |b| (each inf when a value is), `lo` the lowest exponent
/// of any product's last bit (`None`: no nonzero finite product).
///
/// Every exact sum stays below [`near_ok`]'s bound. Products with last bits at
/// or above the format's smallest subnormal and accumulators on its grid make
/// every sum in its subnormal range exact: the split returns it unchanged.
#[allow(clippy::too_many_arguments)]
fn split_ok(prec: i32, limit: f64, sub: i32, acc_max: f32, row_max: f64, b_max: f32, lo: Option<i32>, kn: usize) -> bool {
    near_ok(prec, limit, sub, acc_max, row_max, b_max, kn) && lo.is_none_or(|l| l >= sub)
}

/// Does every exact sum of a depth block of `kn` steps stay below `limit`? Each
/// add's rounding grows a magnitude by at most a factor `growth` in the normal
/// range (to nearest with p bits: 1 + 2^-p; stochastically or in a directed
/// mode, less than a unit: 1 + 2^(1-p)) and by at most `unit` in the
/// subnormal range, whose unit is fixed (up from a tiny product to the
/// smallest subnormal, however small the product; 0 toward zero): with
/// `x' <= (x + |p|) * growth + unit` an add, every sum stays below `(acc_max +
/// row_max * b_max + kn * unit) * growth^kn` (the other arguments as
/// [`split_ok`]'s).
fn block_ok(growth: f64, unit: f64, limit: f64, acc_max: f32, row_max: f64, b_max: f32, kn: usize) -> bool {
    // NaN compares false: refused.
    (acc_max as f64 + row_max * b_max as f64 + kn as f64 * unit) * growth.powi(kn as i32) < limit
}

/// Does the bound of [`block_ok`] leave room in a full depth block (`KB`
/// steps) for a format of `prec` bits rounded up, down or stochastically, where
/// each add can grow a magnitude by a unit? The factor (1 + 2^(1 - prec))^KB
/// is 1.28 for float16, 7.3 for bfloat16, but 1.25^256 for float8_e5m2: its
/// blocks would always fail the bound.
fn bound_room(prec: i32) -> bool {
    (1.0 + 2f64.powi(1 - prec)).powi(KB as i32) < 1024.0
}

/// Can [`Kind16::OddUnit`]'s rounding to odd lose a sticky bit that decides,
/// on products of `pa`- and `pb`-bit values scaled so that the format's
/// smallest unit is 2^`unit` ([`unit_scale`])? `false` when it can (or when
/// the search below would be long).
///
/// The kernel's FMA toward zero gives y, the exact sum x truncated to 24 bits
/// or at 2^-149; the residual FMA gives x - y (acc - y is an f32: both lie on
/// the grid of 2^-149 and |acc - y| <= |p| + |x - y|, below 2^-125 or within a
/// factor 2 of both), truncated at 2^-149 too, so the sticky bit is lost exactly when
/// 0 < |x - y| < 2^-149, which needs a product p with a bit below 2^-149 (a
/// sum of f32 values lies on that grid), and so |p| < 2^(P - 150), P = pa + pb.
/// Rounding y instead of x to nearest differs only where y is a midpoint of
/// the format (the midpoints are f32 values: y can reach one but not pass
/// it), all of them multiples of 2^(unit - 1) and none of them a value of the
/// format, as the accumulator is: p = j 2^(unit - 1) + t with j != 0 and
/// 0 < |t| < 2^-149. With p = N 2^e, N odd, the odd part of a product of
/// integers below 2^pa and 2^pb, the search runs over each j (in units of
/// 2^-149, m = j 2^(unit + 148) <= 2^(P - 1)) and each t, in units of p's
/// lowest possible last bit (P bits below the top of m - 2^-149), both signs.
/// Float16 products into float8_e5m2 (P = 22, unit 2^-128) meet none: the
/// candidates are 2^22 - 1 = 2047 * 2049, 2^22 - 3, 2^21 - 1 and 2^21 + 1, no
/// product of two integers below 2^11.
fn tails_harmless(pa: i32, pb: i32, unit: i32) -> bool {
    let p = pa + pb;
    let sh = unit + 148;
    if !(0..=40).contains(&sh) || !(1..=32).contains(&p) {
        return false;
    }
    // j from 1 while m = j << sh <= 2^(p - 1).
    let jmax = if p > sh { 1u64 << (p - 1 - sh) } else { 0 };
    // The candidates: about 2^(p - 1 - sh) / j each.
    if jmax > 1 << 10 || (1..=jmax).map(|j| (1u64 << (p - 1 - sh)) / j).sum::<u64>() > 1 << 14 {
        return false;
    }
    // Is the odd part of n a product of integers below 2^pa and 2^pb?
    let product = |n: u64| {
        let n = n >> n.trailing_zeros();
        64 - n.leading_zeros() <= p as u32 && (1..1u64 << pa).step_by(2).take_while(|&d| d <= n).any(|d| n.is_multiple_of(d) && n / d < 1 << pb)
    };
    (1..=jmax).all(|j| {
        let m = j << sh;
        // t in units of 2^(-149 - s): p's last bit lies at or above that.
        let s = p - (64 - (m - 1).leading_zeros()) as i32;
        s <= 0 || (1..1u64 << s).all(|t| !product((m << s) + t) && !product((m << s) - t))
    })
}

/// The power of two [`Kind16::Sr`] and [`DirTo::Unit`] scale their values by:
/// 2^(-126 - emin), which puts the format's smallest normal value at f32's,
/// 2^-126, and its smallest subnormal at 2^(-126 - man), bit `23 - man` of
/// f32's subnormal patterns. Scaled, every value of the format has its unit at
/// that bit of its f32 pattern, subnormals included: truncating the pattern
/// there, or adding below it and truncating, rounds at the unit, whatever bits
/// the products have; the FMA's own rounding (24 bits, or at 2^-149) is onto a
/// grid that holds the format's. The scaling is exact for the accumulators (on
/// the format's grid); the products' scale is split between B's depth block
/// (as much of it as its values take, their last bits staying at or above
/// 2^-149) and A's (the rest, checked per block, [`scale_ok`]), and the FMA
/// multiplies the two exactly. 0 for bfloat16, whose subnormals are f32's
/// already.
fn unit_scale(f: &SrFmt) -> i32 {
    -126 - (f.sub + f.prec - 1)
}

/// May a depth block's A values be scaled by 2^`sc` ([`unit_scale`]) exactly,
/// given `lo`, the lowest exponent of any of their last bits ([`exp_bounds`])?
fn scale_ok(sc: i32, lo: Option<i32>) -> bool {
    sc == 0 || lo.is_none_or(|l| l + sc >= -149)
}

/// Do the sums of a depth block rounded to nearest into a format of `prec`
/// bits, smallest subnormal 2^sub, stay below `limit`? Each add grows a
/// magnitude by at most a factor 1 + 2^-p, or half a subnormal unit
/// ([`block_ok`]'s bound). A second bound does not grow with the
/// steps: the rounded `acc + p` is no farther from the exact sum than `acc` is
/// (a value of the format), so `|round(acc + p)| <= |acc| + 2|p|` and every
/// sum stays below `acc_max + 2 * row_max * b_max`; it is the tighter one for
/// few bits (float8_e5m2: the growth factor is 1.125^kn) or a long block
/// after large accumulators.
fn near_ok(prec: i32, limit: f64, sub: i32, acc_max: f32, row_max: f64, b_max: f32, kn: usize) -> bool {
    let growth = (acc_max as f64 + row_max * b_max as f64 + kn as f64 * pow2(sub - 1)) * (1.0 + 2f64.powi(-prec)).powi(kn as i32);
    // NaN compares false: refused.
    growth.min(acc_max as f64 + 2.0 * row_max * b_max as f64) < limit
}

/// Bounds (as [`exp_bounds`]) of the union of two blocks.
fn merge_bounds(x: (i32, i32), y: (i32, i32)) -> (i32, i32) {
    (x.0.min(y.0), x.1.max(y.1))
}

/// One add on 8 lanes, `acc = round(acc + a*b)` to nearest-even into float16,
/// or into bfloat16 with `BF`, as kernel kind `K` computes it.
///
/// # Safety
/// The CPU must support avx2, fma and f16c; see [`Kind16`] for when each kind is exact.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn add16<const K: u8, const BF: bool>(acc: std::arch::x86_64::__m256, a: std::arch::x86_64::__m256, b: std::arch::x86_64::__m256, spl: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // SAFETY: the caller guarantees the CPU features.
    unsafe {
        if K == K_MID {
            let s = _mm256_fmadd_ps(a, b, acc);
            let sb = _mm256_castps_si256(s);
            let flag = if BF {
                // Exactly on a midpoint: the bits below bf16's unit are its half
                // (the subnormals too: their unit is f32's).
                _mm256_cmpeq_epi32(_mm256_and_si256(sb, _mm256_set1_epi32(0xffff)), _mm256_set1_epi32(0x8000))
            } else {
                // Could be on a midpoint, normal or subnormal (low 12 bits zero), and moved.
                let low = _mm256_and_si256(sb, _mm256_set1_epi32(0xfff));
                let near = _mm256_cmpeq_epi32(low, _mm256_setzero_si256());
                _mm256_andnot_si256(_mm256_castps_si256(_mm256_cmp_ps::<_CMP_EQ_OQ>(s, acc)), near)
            };
            if _mm256_movemask_ps(_mm256_castsi256_ps(flag)) != 0 {
                return add16::<K_ODD, BF>(acc, a, b, spl);
            }
            return round16::<BF>(s);
        }
        if K == K_SPLIT {
            // Veltkamp's split of the FMA's sum: with `spl` = 2^q + 1, t - (t - s)
            // keeps its top 24 - q bits, to nearest-even ([`split_mult`]).
            let s = _mm256_fmadd_ps(a, b, acc);
            let t = _mm256_mul_ps(s, spl);
            return _mm256_sub_ps(t, _mm256_sub_ps(t, s));
        }
        let x = if K == K_ODD {
            // TwoSum of acc and the product p = a*b (exact, checked for the block), with
            // the FMA standing in for p: fma(a, b, c) = RN(p + c).
            let s = _mm256_fmadd_ps(a, b, acc);
            let bb = _mm256_sub_ps(s, acc);
            let e = _mm256_add_ps(_mm256_sub_ps(acc, _mm256_sub_ps(s, bb)), _mm256_fmsub_ps(a, b, bb));
            let sb = _mm256_castps_si256(s);
            // e != 0 and ordered: the sum is inexact (e is NaN exactly where s is inf/NaN, left alone).
            let inexact = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_NEQ_OQ>(e, _mm256_setzero_ps()));
            // Round to odd: the odd one of the two f32 neighbours around s + e. When e
            // moves the magnitude up that is s | 1; down, (s - 1) | 1 (bits of the magnitude).
            let down = _mm256_srai_epi32::<31>(_mm256_xor_si256(sb, _mm256_castps_si256(e)));
            let odd = _mm256_or_si256(_mm256_add_epi32(sb, down), _mm256_set1_epi32(1));
            _mm256_castsi256_ps(_mm256_blendv_epi8(sb, odd, inexact))
        } else {
            _mm256_fmadd_ps(a, b, acc)
        };
        round16::<BF>(x)
    }
}

/// `x` rounded into float16 (or bfloat16) to nearest-even, as f32.
///
/// # Safety
/// The CPU must support avx2 and f16c.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn round16<const BF: bool>(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // SAFETY: the caller guarantees the CPU features.
    unsafe {
        if BF {
            // To bfloat16: nearest-even on the bit pattern, keeping the top 16 bits
            // (the carry reaches the exponent, and inf at the top; inf and the
            // quiet NaNs of arithmetic keep their bits).
            let xb = _mm256_castps_si256(x);
            let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(xb), _mm256_set1_epi32(1));
            let r = _mm256_add_epi32(_mm256_add_epi32(xb, _mm256_set1_epi32(0x7fff)), lsb);
            _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(0xffff_0000_u32 as i32)))
        } else {
            // To fp16 (IEEE overflow, NaN stays NaN) and back, exactly.
            _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x))
        }
    }
}

/// `MR x 16` accumulators (row-major in `acc`) over `kn` depth steps:
/// `acc[r][j] = round(acc[r][j] + ap[kk*MR + r] * bp[r*sw + kk*16 + j])` for kk in
/// order, each add as [`add16`] with `K`, `BF` (and Veltkamp's multiplier
/// `spl`, [`split_mult`], for [`Kind16::Split`]).
///
/// # Safety
/// The CPU must support avx2, fma and f16c; `ap` holds kn*MR values, `bp`
/// [`strips_len`]`(MR, sw, kn)`: with `sw` = 0 one strip of kn*16 that every
/// row reads, else (four rows) row r's strip at `bp[r * sw..]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile16<const MR: usize, const K: u8, const BF: bool>(acc: &mut [f32], ap: &[f32], b: BSrc, kn: usize, spl: f32) {
    // SAFETY: per the caller.
    unsafe {
        match b {
            BSrc::Packed(bp, 0) => tile16_strips::<MR, K, BF, false>(acc, ap, bp, kn, spl, 0),
            BSrc::Packed(bp, sw) => tile16_strips::<MR, K, BF, true>(acc, ap, bp, kn, spl, sw),
            BSrc::Codes { p, ld, code: CODE_BF16, strips: false } => tile16_codes::<MR, K, BF, CODE_BF16, false>(acc, ap, p, ld, kn, spl),
            BSrc::Codes { p, ld, code: CODE_F16, strips: false } => tile16_codes::<MR, K, BF, CODE_F16, false>(acc, ap, p, ld, kn, spl),
            BSrc::Codes { p, ld, code: CODE_E5M2, strips: false } => tile16_codes::<MR, K, BF, CODE_E5M2, false>(acc, ap, p, ld, kn, spl),
            BSrc::Codes { p, ld, code: _, strips: false } => tile16_codes::<MR, K, BF, CODE_E4M3FN, false>(acc, ap, p, ld, kn, spl),
            BSrc::Codes { p, ld, code: CODE_BF16, strips: true } => tile16_codes::<MR, K, BF, CODE_BF16, true>(acc, ap, p, ld, kn, spl),
            BSrc::Codes { p, ld, code: CODE_F16, strips: true } => tile16_codes::<MR, K, BF, CODE_F16, true>(acc, ap, p, ld, kn, spl),
            BSrc::Codes { p, ld, code: CODE_E5M2, strips: true } => tile16_codes::<MR, K, BF, CODE_E5M2, true>(acc, ap, p, ld, kn, spl),
            BSrc::Codes { p, ld, code: _, strips: true } => tile16_codes::<MR, K, BF, CODE_E4M3FN, true>(acc, ap, p, ld, kn, spl),
        }
    }
}

/// The codes read in place ([`BSrc::Codes`]): bfloat16, float16 (16 bits),
/// float8_e5m2, float8_e4m3fn (8 bits).
const CODE_BF16: u8 = 0;
const CODE_F16: u8 = 1;
const CODE_E5M2: u8 = 2;
const CODE_E4M3FN: u8 = 3;

/// Bytes a code of kind `code` ([`CODE_BF16`] ...).
const fn code_bytes(code: u8) -> isize {
    if code == CODE_BF16 || code == CODE_F16 {
        2
    } else {
        1
    }
}

/// Eight codes of kind `C` at `p` as f32 lanes: [`super::kernels::codes8_avx2`]
/// for 16-bit codes, [`super::kernels::fp8x8_avx2`] for 8-bit ones (the
/// callers read no NaN code).
///
/// # Safety
/// The CPU must support avx2 and f16c; eight codes at `p` readable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load_codes8<const C: u8>(p: *const u8) -> std::arch::x86_64::__m256 {
    // SAFETY: per the caller.
    unsafe {
        match C {
            CODE_BF16 => super::kernels::codes8_avx2::<false>(p as *const u16),
            CODE_F16 => super::kernels::codes8_avx2::<true>(p as *const u16),
            CODE_E4M3FN => super::kernels::fp8x8_avx2::<true>(p).0,
            _ => super::kernels::fp8x8_avx2::<false>(p).0,
        }
    }
}

/// [`tile16`] on B's codes in place ([`BSrc::Codes`]): every
/// row on the same 16 columns, or with `STRIPS` four rows each on its own (row
/// r's from the code 16 * r on), codes of kind `C` ([`load_codes8`]) decoded as
/// they are loaded.
///
/// # Safety
/// As [`tile16`]; the codes of the kn steps (16, or `16 * MR` with `STRIPS`,
/// from `codes`, `ld` codes apart) readable, none of them a NaN.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile16_codes<const MR: usize, const K: u8, const BF: bool, const C: u8, const STRIPS: bool>(acc: &mut [f32], ap: &[f32], codes: *const u8, ld: isize, kn: usize, spl: f32) {
    use std::arch::x86_64::*;
    assert!((!STRIPS || MR == 4) && acc.len() >= MR * 16 && ap.len() >= kn * MR);
    let es = code_bytes(C) as usize;
    let ld = ld * es as isize;
    // SAFETY: the loads of A and the accumulators are inside the slices (asserted
    // above), those of B's codes per the caller; the CPU features are the caller's contract.
    unsafe {
        let load = |p: *const u8| load_codes8::<C>(p);
        let mut c = [[_mm256_setzero_ps(); 2]; MR];
        for (r, cr) in c.iter_mut().enumerate() {
            cr[0] = _mm256_loadu_ps(acc.as_ptr().add(r * 16));
            cr[1] = _mm256_loadu_ps(acc.as_ptr().add(r * 16 + 8));
        }
        let spl = _mm256_set1_ps(spl);
        let (mut pa, mut pb) = (ap.as_ptr(), codes);
        for _ in 0..kn {
            // The codes a depth block on, where the next block's kernels read them.
            let pf = pb.wrapping_offset(KB as isize * ld) as *const i8;
            _mm_prefetch::<_MM_HINT_T0>(pf);
            _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(64));
            for (r, cr) in c.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*pa.add(r));
                let q = if STRIPS { pb.wrapping_add(16 * r * es) } else { pb };
                cr[0] = add16::<K, BF>(cr[0], av, load(q), spl);
                cr[1] = add16::<K, BF>(cr[1], av, load(q.wrapping_add(8 * es)), spl);
            }
            pa = pa.add(MR);
            pb = pb.wrapping_offset(ld);
        }
        for (r, cr) in c.iter().enumerate() {
            _mm256_storeu_ps(acc.as_mut_ptr().add(r * 16), cr[0]);
            _mm256_storeu_ps(acc.as_mut_ptr().add(r * 16 + 8), cr[1]);
        }
    }
}

/// [`tile16`], each row on its own strip of B with `STRIPS`.
///
/// # Safety
/// As [`tile16`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile16_strips<const MR: usize, const K: u8, const BF: bool, const STRIPS: bool>(acc: &mut [f32], ap: &[f32], bp: &[f32], kn: usize, spl: f32, sw: usize) {
    use std::arch::x86_64::*;
    assert!(acc.len() >= MR * 16 && ap.len() >= kn * MR && bp.len() >= strips_len(MR, sw, kn));
    // SAFETY: every offset is inside the slices (asserted above); the CPU features are the caller's contract.
    unsafe {
        let mut c = [[_mm256_setzero_ps(); 2]; MR];
        for (r, cr) in c.iter_mut().enumerate() {
            cr[0] = _mm256_loadu_ps(acc.as_ptr().add(r * 16));
            cr[1] = _mm256_loadu_ps(acc.as_ptr().add(r * 16 + 8));
        }
        let spl = _mm256_set1_ps(spl);
        let (mut pa, mut pb) = (ap.as_ptr(), bp.as_ptr());
        for _ in 0..kn {
            let b0 = _mm256_loadu_ps(pb);
            let b1 = _mm256_loadu_ps(pb.add(8));
            for (r, cr) in c.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*pa.add(r));
                let (b0, b1) = if STRIPS && r > 0 { (_mm256_loadu_ps(pb.add(r * sw)), _mm256_loadu_ps(pb.add(r * sw + 8))) } else { (b0, b1) };
                cr[0] = add16::<K, BF>(cr[0], av, b0, spl);
                cr[1] = add16::<K, BF>(cr[1], av, b1, spl);
            }
            pa = pa.add(MR);
            pb = pb.add(16);
        }
        for (r, cr) in c.iter().enumerate() {
            _mm256_storeu_ps(acc.as_mut_ptr().add(r * 16), cr[0]);
            _mm256_storeu_ps(acc.as_mut_ptr().add(r * 16 + 8), cr[1]);
        }
    }
}

/// The rounding step of [`tile16_dir`] on accumulator `$c` (the FMA's sum, f32
/// rounded in the mode) into the target format in the mode, `$x`/`$y` a scratch
/// register as xmm/ymm. float16: `vcvtps2ph` in `{rm}` and back.
#[cfg(target_arch = "x86_64")]
macro_rules! dir_f16 {
    ($c:literal, $x:literal, $y:literal, $x2:literal) => {
        concat!("vcvtps2ph ", $x, ", ", $c, ", {rm}\n", "vcvtph2ps ", $c, ", ", $x, "\n")
    };
}
/// float32: the FMA's rounding is the rounding.
#[cfg(target_arch = "x86_64")]
macro_rules! dir_f32 {
    ($c:literal, $x:literal, $y:literal, $x2:literal) => {
        ""
    };
}
/// bfloat16 toward zero: the top 16 bits (`[{k}]` holds 0xffff0000 words).
#[cfg(target_arch = "x86_64")]
macro_rules! dir_bf_tz {
    ($c:literal, $x:literal, $y:literal, $x2:literal) => {
        concat!("vpand ", $c, ", ", $c, ", ymmword ptr [{k}]\n")
    };
}
/// bfloat16 up or down: the values rounded away from zero (up: the positive
/// ones, `$sel` = "vpandn" of the sign mask; down: the negative ones, "vpand")
/// add 0xffff below the top 16 bits first (a nonzero remainder carries one unit,
/// into the exponent and to infinity too; `[{k} + 32]` holds 0xffff words); the
/// others are truncated.
#[cfg(target_arch = "x86_64")]
macro_rules! dir_bf_carry {
    ($sel:literal, $c:literal, $y:literal) => {
        concat!(
            "vpsrad ", $y, ", ", $c, ", 31\n",
            $sel, " ", $y, ", ", $y, ", ymmword ptr [{k} + 32]\n",
            "vpaddd ", $c, ", ", $c, ", ", $y, "\n",
            "vpand ", $c, ", ", $c, ", ymmword ptr [{k}]\n",
        )
    };
}
#[cfg(target_arch = "x86_64")]
macro_rules! dir_bf_up {
    ($c:literal, $x:literal, $y:literal, $x2:literal) => {
        dir_bf_carry!("vpandn", $c, $y)
    };
}
#[cfg(target_arch = "x86_64")]
macro_rules! dir_bf_dn {
    ($c:literal, $x:literal, $y:literal, $x2:literal) => {
        dir_bf_carry!("vpand", $c, $y)
    };
}

/// float8_e5m2 (the top 8 bits of float16's pattern, the same exponent field):
/// to float16 in `{rm}`, then the directed rounding of the top 8 bits of the
/// pattern in 16-bit lanes (`[{k} + 96]` holds 0xff00 halves, `[{k} + 112]`
/// 0x00ff), and back. Toward zero keeps the top 8 bits.
#[cfg(target_arch = "x86_64")]
macro_rules! dir_e5_tz {
    ($c:literal, $x:literal, $y:literal, $x2:literal) => {
        concat!(
            "vcvtps2ph ", $x, ", ", $c, ", {rm}\n",
            "vpand ", $x, ", ", $x, ", xmmword ptr [{k} + 96]\n",
            "vcvtph2ps ", $c, ", ", $x, "\n",
        )
    };
}
/// float8_e5m2 up or down: the patterns rounded away from zero (selected by
/// `$sel` as in [`dir_bf_carry`]) add 0x00ff first (a nonzero remainder carries
/// one unit, into the exponent and to infinity too); the others are truncated.
#[cfg(target_arch = "x86_64")]
macro_rules! dir_e5_carry {
    ($sel:literal, $c:literal, $x:literal, $x2:literal) => {
        concat!(
            "vcvtps2ph ", $x, ", ", $c, ", {rm}\n",
            "vpsraw ", $x2, ", ", $x, ", 15\n",
            $sel, " ", $x2, ", ", $x2, ", xmmword ptr [{k} + 112]\n",
            "vpaddw ", $x, ", ", $x, ", ", $x2, "\n",
            "vpand ", $x, ", ", $x, ", xmmword ptr [{k} + 96]\n",
            "vcvtph2ps ", $c, ", ", $x, "\n",
        )
    };
}
#[cfg(target_arch = "x86_64")]
macro_rules! dir_e5_up {
    ($c:literal, $x:literal, $y:literal, $x2:literal) => {
        dir_e5_carry!("vpandn", $c, $x, $x2)
    };
}
#[cfg(target_arch = "x86_64")]
macro_rules! dir_e5_dn {
    ($c:literal, $x:literal, $y:literal, $x2:literal) => {
        dir_e5_carry!("vpand", $c, $x, $x2)
    };
}

/// `$go!($($pre)* r)` with `r` the rounding macro of [`tile16_dir`] target `$t`
/// in the mode of rounding control `$rm` (the `_MM_FROUND_*` constants in scope).
#[cfg(target_arch = "x86_64")]
macro_rules! by_dir_rounding {
    ($t:expr, $rm:expr, $go:ident!($($pre:tt)*) $(, $post:expr)?) => {
        match ($t, $rm) {
            (0, _) => $go!($($pre)* dir_f16 $(, $post)?),
            (2, _) => $go!($($pre)* dir_f32 $(, $post)?),
            (1, _MM_FROUND_TO_ZERO) => $go!($($pre)* dir_bf_tz $(, $post)?),
            (1, _MM_FROUND_TO_POS_INF) => $go!($($pre)* dir_bf_up $(, $post)?),
            (1, _) => $go!($($pre)* dir_bf_dn $(, $post)?),
            (_, _MM_FROUND_TO_ZERO) => $go!($($pre)* dir_e5_tz $(, $post)?),
            (_, _MM_FROUND_TO_POS_INF) => $go!($($pre)* dir_e5_up $(, $post)?),
            _ => $go!($($pre)* dir_e5_dn $(, $post)?),
        }
    };
}

/// One row of a [`tile16_dir`] step: the broadcast `a` at byte `$off` of the
/// strip, two FMAs (rounded by MXCSR), each sum rounded by `$r`.
#[cfg(target_arch = "x86_64")]
macro_rules! dir_row {
    ($r:ident, $off:literal, $c0:literal, $o0:literal, $c1:literal, $o1:literal) => {
        concat!(
            "vbroadcastss ymm14, dword ptr [{pa} + ", $off, "]\n",
            "vfmadd231ps ", $c0, ", ymm14, ymm12\n",
            "vfmadd231ps ", $c1, ", ymm14, ymm13\n",
            $r!($c0, "xmm15", "ymm15", "xmm14"),
            $r!($c1, "xmm14", "ymm14", "xmm15"),
        )
    };
}

/// Load of accumulator `$c` from byte `$off` of the tile.
#[cfg(target_arch = "x86_64")]
macro_rules! dir_load {
    ($c:literal, $off:literal) => {
        concat!("vmovups ", $c, ", ymmword ptr [{c} + ", $off, "]\n")
    };
}
/// Store of accumulator `$c` at byte `$off` of the tile, after the zero fix of
/// [`tile16_dir`] (`[{nz}]`: the pattern to clear).
#[cfg(target_arch = "x86_64")]
macro_rules! dir_store {
    ($c:literal, $off:literal) => {
        concat!(
            "vpcmpeqd ymm15, ", $c, ", ymmword ptr [{nz}]\n",
            "vpandn ", $c, ", ymm15, ", $c, "\n",
            "vmovups ymmword ptr [{c} + ", $off, "], ", $c, "\n",
        )
    };
}

/// Store of accumulator `$c` at byte `$off` of the tile.
#[cfg(target_arch = "x86_64")]
macro_rules! tile_store {
    ($c:literal, $off:literal) => {
        concat!("vmovups ymmword ptr [{c} + ", $off, "], ", $c, "\n")
    };
}

/// The length of B's values a tile kernel of `mr` rows reads over `kn` steps:
/// one strip of `kn` x 16 values (`sw` = 0, every row on it) or one per row,
/// `sw` values apart.
fn strips_len(mr: usize, sw: usize, kn: usize) -> usize {
    if sw == 0 { kn * 16 } else { (mr - 1) * sw + kn * 16 }
}

/// Where the tile kernels of [`tile16_oddz`] and [`tile16_unit`] read B.
#[derive(Clone, Copy)]
enum BSrc<'a> {
    /// Packed strips of 16 values a step: with `sw` = 0 one strip that every
    /// row reads, else (four rows) row r's strip at `sw * r` ([`strips_len`]).
    Packed(&'a [f32], usize),
    /// A row-major B in place (products of few rows, [`drive16`]), of codes of
    /// kind `code` ([`CODE_BF16`], [`CODE_F16`], [`CODE_E5M2`],
    /// [`CODE_E4M3FN`]): the code of the tile's first column at the first step,
    /// `ld` codes (possibly negative) from one step to the next; every row of
    /// the tile reads the same 16 codes a step, or with `strips` (one row's
    /// product taken four strips at a time) row r the 16 from `16 * r`
    /// ([`load_codes8`], `code_load!`). None of them is a NaN. The 8-bit codes
    /// are read by [`tile16`], [`tile16_dir`] and [`tile16_unit`] without `ODD`.
    Codes { p: *const u8, ld: isize, code: u8, strips: bool },
}

impl<'a> BSrc<'a> {
    /// The packed strips and their distance (an empty strip for [`BSrc::Codes`]).
    fn packed(self) -> (&'a [f32], usize) {
        match self {
            BSrc::Packed(bp, sw) => (bp, sw),
            BSrc::Codes { .. } => (&[], 0),
        }
    }
}

/// The loads of a step's 16 values of B into `$b0` and `$b1` (`tile_asm!`):
/// packed f32 (`f32`; with no `$b0`, only the second 8, the row macros reading
/// the first from `[{pb}]`), or codes in place (`bf16`, `f16`: `code_load!`).
#[cfg(target_arch = "x86_64")]
macro_rules! tile_top {
    (f32, [$($b0:tt)?], $b1:tt) => {
        concat!($("vmovups ", $b0, ", ymmword ptr [{pb}]\n",)? "vmovups ", $b1, ", ymmword ptr [{pb} + 32]")
    };
    ($mode:ident, [$b0:tt], $b1:tt) => {
        code_load!($mode, $b0, $b1, "0")
    };
}

/// 16 codes at byte `$off` of `[{pb}]` as f32 values in `$b0` and `$b1`:
/// bfloat16 codes (`bf16`) widened to 32 bits and moved to the top half (a
/// bfloat16 value is the top half of its f32 pattern; a NaN keeps its payload,
/// so the callers read in place only blocks without NaNs), or float16 codes
/// (`f16`) by `vcvtph2ps` (exact; a NaN quieted, its payload kept).
#[cfg(target_arch = "x86_64")]
macro_rules! code_load {
    (bf16, $b0:tt, $b1:tt, $off:expr) => {
        concat!(
            "vpmovzxwd ", $b0, ", xmmword ptr [{pb} + ", $off, "]\n",
            "vpmovzxwd ", $b1, ", xmmword ptr [{pb} + ", $off, " + 16]\n",
            "vpslld ", $b0, ", ", $b0, ", 16\n",
            "vpslld ", $b1, ", ", $b1, ", 16",
        )
    };
    (f16, $b0:tt, $b1:tt, $off:expr) => {
        concat!(
            "vcvtph2ps ", $b0, ", xmmword ptr [{pb} + ", $off, "]\n",
            "vcvtph2ps ", $b1, ", xmmword ptr [{pb} + ", $off, " + 16]",
        )
    };
    // float8 codes, into the registers of [`tile16_dir`] and [`tile16_unit`]'s
    // nearest-even kernel (ymm12, ymm13), whose constants `{k}` hold: e5m2 codes
    // are the top bytes of float16 codes; e4m3fn codes sign-extended and moved up 7
    // bits, bit 14 cleared (`[{k} + 160]`), are the float16 codes of their values
    // times 2^-8, multiplied back by 2^8 (`[{k} + 176]`, exact in any rounding mode).
    (e5m2, "ymm12", "ymm13", $off:expr) => {
        concat!(
            "vpmovzxbw xmm12, qword ptr [{pb} + ", $off, "]\n",
            "vpmovzxbw xmm13, qword ptr [{pb} + ", $off, " + 8]\n",
            "vpsllw xmm12, xmm12, 8\n",
            "vpsllw xmm13, xmm13, 8\n",
            "vcvtph2ps ymm12, xmm12\n",
            "vcvtph2ps ymm13, xmm13",
        )
    };
    (e4m3, "ymm12", "ymm13", $off:expr) => {
        concat!(
            "vpmovsxbw xmm12, qword ptr [{pb} + ", $off, "]\n",
            "vpmovsxbw xmm13, qword ptr [{pb} + ", $off, " + 8]\n",
            "vpsllw xmm12, xmm12, 7\n",
            "vpsllw xmm13, xmm13, 7\n",
            "vpand xmm12, xmm12, xmmword ptr [{k} + 160]\n",
            "vpand xmm13, xmm13, xmmword ptr [{k} + 160]\n",
            "vcvtph2ps ymm12, xmm12\n",
            "vcvtph2ps ymm13, xmm13\n",
            "vmulps ymm12, ymm12, ymmword ptr [{k} + 176]\n",
            "vmulps ymm13, ymm13, ymmword ptr [{k} + 176]",
        )
    };
}

/// The byte offset of strip `$s` (1 to 3) of a row in place for `tile_asm!`'s
/// `in4s`: 16 codes a strip.
#[cfg(target_arch = "x86_64")]
macro_rules! strip_off {
    (bf16, 1) => { "32" };
    (bf16, 2) => { "64" };
    (bf16, 3) => { "96" };
    (f16, $s:tt) => { strip_off!(bf16, $s) };
    (e5m2, 1) => { "16" };
    (e5m2, 2) => { "32" };
    (e5m2, 3) => { "48" };
    (e4m3, $s:tt) => { strip_off!(e5m2, $s) };
}

/// The step of B's pointer in `tile_asm!`: a packed strip's 64 bytes, or B's
/// row stride in place (`{bs}` bytes).
#[cfg(target_arch = "x86_64")]
macro_rules! tile_bstep {
    (f32) => {
        "add {pb}, 64"
    };
    ($mode:ident) => {
        concat!("prefetcht0 byte ptr [{pb} + {pf}]\n", "prefetcht0 byte ptr [{pb} + {pf} + 64]\n", "add {pb}, {bs}")
    };
}

/// The assembly block of the f32 tile kernels that set MXCSR ([`tile16_dir`],
/// [`tile16_oddz`], [`tile16_sr`]) for `MR` = 6, 4 or 1 rows: MXCSR entered
/// and `setup`, the accumulators loaded, then `{kn}` steps, each loading 16
/// values of B into `b` (`([b0], b1)`, then `b`'s further instructions; with
/// `([], b1)` only the second 8 into `b1`, the row macros reading the first 8
/// from `[{pb}]`), running `row!(r, off, c0, o0, c1, o1)` for every row
/// (`a` at byte `off` of the strip, accumulators `c0` and `c1` at bytes `o0`
/// and `o1` of the tile, `r` the kernel's rounding macro) and `step`; then
/// `store!(c, o)` for every accumulator, the kernel's MXCSR stored at `[{csr} +
/// 4]` (its flags: precision, bit 5, when some rounding was inexact) and
/// MXCSR restored. `io` names the
/// tile, the strips of A and B, the step count, MXCSR's save area and the
/// rounding control (operands `c`, `pa`, `pb`, `kn`, `csr`, `rc`; `t` is
/// scratch); the kernel's own operands follow; the accumulators, `b` and
/// `clobber` are declared clobbered. With `runs: [pre], [post]`, `pre` runs
/// before the steps' loop and `post` after it (an outer loop of runs checked
/// at their starts, [`tile16_dir_runs`]). With `scale: [in], [out]`, `in`
/// runs after the loads and `out` before the stores (the accumulators scaled
/// in the kernel, [`tile16_sr`]). With `(w4, sw, sw3)` for `MR`, four rows
/// each read their own strip of B, `sw` bytes apart (operands `sw`, `sw3` =
/// 3 * `sw`): row 0 the step's loads, rows 1 to 3 their own loads into `b`
/// before their row macros (one row's product taken four strips at a time,
/// on A's value repeated in the four rows). With `(in4, mode, bs)` or `(in1, mode, bs)`,
/// four rows as `w4`'s or one, B's bfloat16 or float16 rows in place ([`BSrc::Codes`]):
/// each step's codes decoded into `b` (`code_load!`, `mode` bf16 or f16), row r's 16 at byte 32 r,
/// the next step `bs` bytes on (operand `bs`), the codes a depth block further
/// on prefetched (operand `pf`), where the next block's kernels will read them.
#[cfg(target_arch = "x86_64")]
macro_rules! tile_asm {
    (6, $($rest:tt)*) => {
        tile_asm!(@six f32 [] $($rest)*)
    };
    (4, $($rest:tt)*) => {
        tile_asm!(@four f32 [] $($rest)*)
    };
    (1, $($rest:tt)*) => {
        tile_asm!(@one f32 [] $($rest)*)
    };
    // B's rows of bf16 or f16 codes in place, `{bs}` bytes apart (operand `bs`),
    // decoded in registers (`code_load!`), every row on the same 16 columns.
    ((in6, $mode:ident, $bs:expr), $($rest:tt)*) => {
        tile_asm!(@six $mode [bs = in(reg) $bs, pf = in(reg) $bs * KB as isize,] $($rest)*)
    };
    ((in4, $mode:ident, $bs:expr), $($rest:tt)*) => {
        tile_asm!(@four $mode [bs = in(reg) $bs, pf = in(reg) $bs * KB as isize,] $($rest)*)
    };
    ((in1, $mode:ident, $bs:expr), $($rest:tt)*) => {
        tile_asm!(@one $mode [bs = in(reg) $bs, pf = in(reg) $bs * KB as isize,] $($rest)*)
    };
    (@six $mode:ident [$($op:tt)*] $($rest:tt)*) => {
        tile_asm!(@rows $mode "24", [
            ("0", "ymm0", "0", "ymm1", "32"), ("4", "ymm2", "64", "ymm3", "96"),
            ("8", "ymm4", "128", "ymm5", "160"), ("12", "ymm6", "192", "ymm7", "224"),
            ("16", "ymm8", "256", "ymm9", "288"), ("20", "ymm10", "320", "ymm11", "352")
        ], $($rest)* $($op)*)
    };
    (@four $mode:ident [$($op:tt)*] $($rest:tt)*) => {
        tile_asm!(@rows $mode "16", [
            ("0", "ymm0", "0", "ymm1", "32"), ("4", "ymm2", "64", "ymm3", "96"),
            ("8", "ymm4", "128", "ymm5", "160"), ("12", "ymm6", "192", "ymm7", "224")
        ], $($rest)* $($op)*)
    };
    (@one $mode:ident [$($op:tt)*] $($rest:tt)*) => {
        tile_asm!(@rows $mode "4", [("0", "ymm0", "0", "ymm1", "32")], $($rest)* $($op)*)
    };
    // Four rows, each on its own strip of B: row r's at `{pb} + r * {sw}`
    // bytes (`{sw3}` = 3 * `{sw}`), loaded into `b` before its row.
    ((w4, $sw:expr, $sw3:expr), setup: [$($setup:expr),*], b: ([$b0:tt], $b1:tt), $($rest:tt)*) => {
        tile_asm!(@rows f32 "16", [
            ("0", "ymm0", "0", "ymm1", "32"),
            ("4", "ymm2", "64", "ymm3", "96",
                concat!("vmovups ", $b0, ", ymmword ptr [{pb} + {sw}]"), concat!("vmovups ", $b1, ", ymmword ptr [{pb} + {sw} + 32]")),
            ("8", "ymm4", "128", "ymm5", "160",
                concat!("vmovups ", $b0, ", ymmword ptr [{pb} + {sw}*2]"), concat!("vmovups ", $b1, ", ymmword ptr [{pb} + {sw}*2 + 32]")),
            ("12", "ymm6", "192", "ymm7", "224",
                concat!("vmovups ", $b0, ", ymmword ptr [{pb} + {sw3}]"), concat!("vmovups ", $b1, ", ymmword ptr [{pb} + {sw3} + 32]"))
        ], setup: [$($setup),*], b: ([$b0], $b1), $($rest)* sw = in(reg) $sw, sw3 = in(reg) $sw3,)
    };
    // B's codes in place, four rows each on its own 16 columns of a row (`strip_off!`
    // apart), as `w4`'s strips.
    ((in4s, $mode:ident, $bs:expr), setup: [$($setup:expr),*], b: ([$b0:tt], $b1:tt), $($rest:tt)*) => {
        tile_asm!(@rows $mode "16", [
            ("0", "ymm0", "0", "ymm1", "32"),
            ("4", "ymm2", "64", "ymm3", "96", code_load!($mode, $b0, $b1, strip_off!($mode, 1))),
            ("8", "ymm4", "128", "ymm5", "160", code_load!($mode, $b0, $b1, strip_off!($mode, 2))),
            ("12", "ymm6", "192", "ymm7", "224", code_load!($mode, $b0, $b1, strip_off!($mode, 3)))
        ], setup: [$($setup),*], b: ([$b0], $b1), $($rest)* bs = in(reg) $bs, pf = in(reg) $bs * KB as isize,)
    };
    (@rows $mode:ident $stride:literal, [$(($off:literal, $c0:tt, $o0:literal, $c1:tt, $o1:literal $(, $ld:expr)*)),*],
     setup: [$($setup:expr),*], b: ([$($b0:tt)?], $b1:tt $(, $bx:expr)*), row: $row:ident($r:ident), step: [$($step:expr),*],
     store: $store:ident, clobber: [$($clob:tt),*], $(scale: [$($sin:expr),*], [$($sout:expr),*],)?
     $(runs: [$($pre:expr),*], [$($post:expr),*],)?
     io: ($acc:expr, $ap:expr, $bp:expr, $kn:expr, $csr:expr, $rc:expr), $($ops:tt)*) => {
        asm!(
            mxcsr_enter!(),
            $($setup,)*
            $(dir_load!($c0, $o0), dir_load!($c1, $o1),)*
            $($($sin,)*)?
            $($($pre,)*)?
            "2:",
            tile_top!($mode, [$($b0)?], $b1),
            $($bx,)*
            $($($ld,)* $row!($r, $off, $c0, $o0, $c1, $o1),)*
            concat!("add {pa}, ", $stride),
            tile_bstep!($mode),
            $($step,)*
            "dec {kn}",
            "jnz 2b",
            $($($post,)*)?
            $($($sout,)*)?
            $($store!($c0, $o0), $store!($c1, $o1),)*
            "vstmxcsr dword ptr [{csr} + 4]",
            "vldmxcsr dword ptr [{csr}]",
            c = in(reg) $acc.as_mut_ptr(),
            pa = inout(reg) $ap.as_ptr() => _,
            pb = inout(reg) $bp => _,
            kn = inout(reg) $kn => _,
            csr = in(reg) $csr.as_mut_ptr(),
            rc = in(reg) $rc,
            t = out(reg) _,
            $($ops)*
            $(out($c0) _, out($c1) _,)*
            $(out($b0) _,)? out($b1) _, $(out($clob) _,)*
            options(nostack),
        )
    };
}

/// The assembly block of [`tile16_dir`] for `MR` = 6 or 1 rows, rounding with `$r`.
#[cfg(target_arch = "x86_64")]
macro_rules! dir_asm {
    ($mr:tt, $r:ident, $($ops:tt)*) => {
        tile_asm!($mr,
            setup: ["# constants at {k}, rounding control {rm}"],
            b: (["ymm12"], "ymm13"),
            row: dir_row($r),
            step: [],
            store: dir_store,
            clobber: ["ymm14", "ymm15"],
            $($ops)*
        )
    };
}

/// The format a [`Kind16::Dir`] kernel rounds into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DirTo {
    F16,
    Bf16,
    F32,
    E5m2,
    /// An IEEE-style format of at most 10 mantissa bits whose normal range f32
    /// holds ([`sr_fmt`], such as FloatFormat(6, 9)), its unit this bit of the
    /// f32 pattern (13 to 21): bfloat16's integer rounding at that bit on
    /// values scaled by [`unit_scale`], in depth blocks whose values keep every
    /// sum below its largest value ([`block_ok`]) and whose A values scale
    /// exactly (the others run the conversions for float16 and float8_e5m2,
    /// else the f64 rounding).
    Unit(u8),
}

/// Which [`Kind16::Dir`] target `fmt` is, when `opts` round it toward zero, up or
/// down with IEEE overflow (not saturating).
fn dir_to(fmt: &Format, opts: &RoundOpts) -> Option<DirTo> {
    if opts.saturate || !matches!(opts.mode, Mode::TowardZero | Mode::Up | Mode::Down) {
        return None;
    }
    match fmt {
        Format::Float(f) if *f == named::FLOAT16 => Some(DirTo::F16),
        Format::Float(f) if *f == named::BFLOAT16 => Some(DirTo::Bf16),
        Format::Float(f) if *f == named::FLOAT32 => Some(DirTo::F32),
        Format::Float(f) if *f == named::FLOAT8_E5M2 => Some(DirTo::E5m2),
        _ => sr_fmt(fmt).map(|f| DirTo::Unit(f.unit as u8)),
    }
}

/// Constants of the bfloat16 and float8_e5m2 roundings in [`tile16_dir`] and
/// [`tile16_oddz`]: 8 words each of 0xffff0000, 0xffff and 0x7fff, then 4 words
/// each of 0xff00ff00, 0x00ff00ff, 0x00010001, 0x007f007f and 0xbfffbfff
/// (16-bit halves 0xff00, 0x00ff, 0x0001, 0x007f, 0xbfff), then 8 of 256.0
/// (the decode of e4m3fn codes in place, `code_load!`).
#[cfg(target_arch = "x86_64")]
#[repr(C, align(32))]
struct DirConsts([u32; 52]);

#[cfg(target_arch = "x86_64")]
impl DirConsts {
    /// The constants of target `to`: [`DIR_CONSTS`], but for [`DirTo::Unit`]
    /// the masks of bfloat16's rounding at its unit (the bits from the unit up,
    /// and those below it, in place of 0xffff0000 and 0xffff).
    fn of(to: DirTo) -> DirConsts {
        let mut c = DirConsts(DIR_CONSTS.0);
        if let DirTo::Unit(u) = to {
            let low = (1u32 << u) - 1;
            c.0[..8].fill(!low);
            c.0[8..16].fill(low);
        }
        c
    }
}
#[cfg(target_arch = "x86_64")]
static DIR_CONSTS: DirConsts = DirConsts({
    let mut w = [0xffff_0000u32; 52];
    let mut i = 8;
    while i < 52 {
        w[i] = match i / 4 {
            2 | 3 => 0xffff,
            4 | 5 => 0x7fff,
            6 => 0xff00_ff00,
            7 => 0x00ff_00ff,
            8 => 0x0001_0001,
            9 => 0x007f_007f,
            10 => 0xbfff_bfff,
            // 256.0
            _ => 0x4380_0000,
        };
        i += 1;
    }
    w
});

/// Bit patterns the zero fix of [`tile16_dir`] clears: -0 (rounding down), or
/// one no add produces (a NaN with every payload bit set: the kernels' NaNs are
/// the default NaN, widened float16 NaNs or NaNs with the low 16 bits cleared).
#[cfg(target_arch = "x86_64")]
static DIR_NEG_ZERO: [u32; 8] = [0x8000_0000; 8];
#[cfg(target_arch = "x86_64")]
static DIR_NO_FIX: [u32; 8] = [u32::MAX; 8];

/// The tile kernel of the directed modes ([`Kind16::Dir`]) into float16
/// (`T` = 0), bfloat16 (1), float32 (2) or float8_e5m2 (3), `MR` (1 or 6)
/// rows, or 4 on their own strips: as [`tile16`], each add the FMA with MXCSR set to the mode RM (one of
/// the `vcvtps2ph` rounding controls, which are MXCSR's codes), then the
/// rounding into the format in RM: `vcvtps2ph` and back, the integer rounding
/// of the top 16 bits, nothing, or `vcvtps2ph`, the integer rounding of the
/// float16 pattern's top 8 bits and back. The FMA rounds the exact `acc + a*b`
/// once to f32 in RM, and rounding that into the format in RM is rounding the
/// exact sum: a directed rounding into a coarser grid contained in the finer
/// one composes (every float8_e5m2 is a float16, every float16 and bfloat16 an
/// f32, subnormals included; past the largest value each gives what IEEE
/// overflow gives). So any inputs whose values are
/// f32 work, whatever their products. The FMA is the only floating-point
/// operation that runs under the changed MXCSR, and all of it is in one
/// assembly block that restores MXCSR before it ends.
///
/// Signed zeros follow the f64 path: an exact zero sum there is +0 in every
/// mode (its sum is rounded to nearest), where the FMA rounding down gives -0;
/// rounding down never makes a -0 from a nonzero sum, so a -0 left in a
/// tile when it is stored is set to +0 (an intermediate -0 changes no later
/// nonzero sum, and makes the next exact zero -0 again). This needs the
/// accumulators entering a tile rounding down to be no -0: they start at +0
/// and come from earlier tiles' stores.
///
/// # Safety
/// The CPU must support avx2, fma and f16c; `ap` holds kn*MR values, `bp`
/// [`strips_len`]`(MR, sw, kn)`: with `sw` = 0 one strip of kn*16 that every
/// row reads, else (four rows) row r's strip at `bp[r * sw..]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile16_dir<const MR: usize, const T: u8, const RM: i32>(acc: &mut [f32], ap: &[f32], b: BSrc, kn: usize, k: &DirConsts) {
    use std::arch::asm;
    use std::arch::x86_64::{_MM_FROUND_TO_NEG_INF, _MM_FROUND_TO_POS_INF, _MM_FROUND_TO_ZERO};
    let (bp, sw) = b.packed();
    let in_place = matches!(b, BSrc::Codes { .. });
    let strips = matches!(b, BSrc::Codes { strips: true, .. });
    assert!((MR == 1 || MR == 6 && !strips || MR == 4 && (sw != 0 || strips)) && T <= 3 && (1..4).contains(&RM));
    assert!(acc.len() >= MR * 16 && ap.len() >= kn * MR && (in_place || bp.len() >= strips_len(MR, sw, kn)));
    if kn == 0 {
        return;
    }
    let rc = (RM as u32) << 13;
    let nz = if RM == _MM_FROUND_TO_NEG_INF { DIR_NEG_ZERO.as_ptr() } else { DIR_NO_FIX.as_ptr() };
    let mut csr = [0u32; 2];
    macro_rules! go {
        ($mr:tt, $r:ident) => {
            go!($mr, $r, bp.as_ptr())
        };
        ($mr:tt, $r:ident, $bp:expr) => {
            dir_asm!($mr, $r,
                io: (acc, ap, $bp, kn, csr, rc),
                nz = in(reg) nz,
                k = in(reg) k.0.as_ptr(),
                rm = const RM,
            )
        };
    }
    if let BSrc::Codes { p: codes, ld, code: kind, .. } = b {
        let bs = ld * code_bytes(kind);
        // SAFETY: per the caller, B's codes of the kn steps (16, or 64 for four strips,
        // from `codes`, `bs` bytes apart) are readable; the stores stay inside acc
        // (asserted), the loads inside ap and the constants; MXCSR is restored before
        // the block ends; the clobbered vector registers are declared.
        unsafe {
            match (MR, kind) {
                (4, CODE_BF16) => by_dir_rounding!(T, RM, go!((in4s, bf16, bs),), codes),
                (4, CODE_F16) => by_dir_rounding!(T, RM, go!((in4s, f16, bs),), codes),
                (4, CODE_E5M2) => by_dir_rounding!(T, RM, go!((in4s, e5m2, bs),), codes),
                (4, _) => by_dir_rounding!(T, RM, go!((in4s, e4m3, bs),), codes),
                (6, CODE_BF16) => by_dir_rounding!(T, RM, go!((in6, bf16, bs),), codes),
                (6, CODE_F16) => by_dir_rounding!(T, RM, go!((in6, f16, bs),), codes),
                (6, CODE_E5M2) => by_dir_rounding!(T, RM, go!((in6, e5m2, bs),), codes),
                (6, _) => by_dir_rounding!(T, RM, go!((in6, e4m3, bs),), codes),
                (_, CODE_BF16) => by_dir_rounding!(T, RM, go!((in1, bf16, bs),), codes),
                (_, CODE_F16) => by_dir_rounding!(T, RM, go!((in1, f16, bs),), codes),
                (_, CODE_E5M2) => by_dir_rounding!(T, RM, go!((in1, e5m2, bs),), codes),
                _ => by_dir_rounding!(T, RM, go!((in1, e4m3, bs),), codes),
            }
        }
        return;
    }
    // SAFETY: the loads and stores stay inside acc (MR*16 values), ap (kn*MR) and
    // bp (strips_len(MR, sw, kn)), asserted above, and the 32-byte constants; MXCSR is restored
    // before the block ends; the clobbered vector registers are declared.
    unsafe {
        let (swb, sw3b) = (sw * 4, sw * 12);
        if MR == 4 {
            by_dir_rounding!(T, RM, go!((w4, swb, sw3b),))
        } else if MR == 6 {
            by_dir_rounding!(T, RM, go!(6,))
        } else {
            by_dir_rounding!(T, RM, go!(1,))
        }
    }
}

/// [`tile16_dir`] for target `to` and rounding control `rm` (toward zero, up or down).
///
/// # Safety
/// As [`tile16_dir`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile16_dir_to<const MR: usize>(to: DirTo, rm: i32, acc: &mut [f32], ap: &[f32], b: BSrc, kn: usize) {
    let k = DirConsts::of(to);
    // SAFETY: per the caller.
    unsafe {
        match to {
            DirTo::F16 => by_f16_rounding!(rm, R => tile16_dir::<MR, 0, R>(acc, ap, b, kn, &k)),
            DirTo::Bf16 | DirTo::Unit(_) => by_f16_rounding!(rm, R => tile16_dir::<MR, 1, R>(acc, ap, b, kn, &k)),
            DirTo::F32 => by_f16_rounding!(rm, R => tile16_dir::<MR, 2, R>(acc, ap, b, kn, &k)),
            DirTo::E5m2 => by_f16_rounding!(rm, R => tile16_dir::<MR, 3, R>(acc, ap, b, kn, &k)),
        }
    }
}

/// The check at the start of a run of the f32 kernels' checked runs (label
/// 3; [`tile16_dir_runs`], [`tile16_sr_runs`]): the largest magnitude of the
/// accumulators (into `$x`, `$y` scratch; `$m` the magnitude mask operand)
/// against the bound `$b`, leaving for label 9 past it, else `{kn}` set to the
/// run's steps.
#[cfg(target_arch = "x86_64")]
macro_rules! runs_check {
    ($x:literal, $y:literal, $m:literal, $b:literal, [$c0:literal $(, $c:literal)*]) => {
        concat!(
            "3:\n",
            "vpand ", $x, ", ", $c0, ", ", $m, "\n",
            $("vpand ", $y, ", ", $c, ", ", $m, "\n", "vpmaxud ", $x, ", ", $x, ", ", $y, "\n",)*
            // Magnitude patterns are below 2^31: the signed compare orders them.
            "vpcmpgtd ", $x, ", ", $x, ", ", $b, "\n",
            "vptest ", $x, ", ", $x, "\n",
            "jnz 9f\n",
            "mov {kn}, {run}\n",
        )
    };
}

/// [`tile16_dir`] into a [`DirTo::Unit`] format, 6 rows, where no bound on the
/// depth block keeps the sums below the largest value: `runs` runs of `run`
/// steps, each checked at its start: it runs while the largest accumulator
/// magnitude, as an f32 pattern, is at most `top` (the caller's bound: from
/// there no sum of a run can pass the largest value, which the integer
/// rounding at the unit does not respect). Returns the runs done; the tile
/// holds their sums. A check costs about 27 operations a run of 12 * 5 a step.
///
/// # Safety
/// As [`tile16_dir`]'s, with kn = runs * run; `top` below f32's infinity.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile16_dir_runs<const RM: i32>(to: DirTo, acc: &mut [f32], ap: &[f32], bp: &[f32], runs: usize, run: usize, top: u32) -> usize {
    use std::arch::asm;
    use std::arch::x86_64::{_MM_FROUND_TO_NEG_INF, _MM_FROUND_TO_POS_INF, _MM_FROUND_TO_ZERO};
    let kn = runs * run;
    assert!(matches!(to, DirTo::Unit(_)) && (1..4).contains(&RM) && run >= 1 && top < 0x7f80_0000);
    assert!(acc.len() >= 96 && ap.len() >= kn * 6 && bp.len() >= kn * 16);
    if runs == 0 {
        return 0;
    }
    let k = DirConsts::of(to);
    let rk = Consts2([[0x7fff_ffff; 8], [top; 8]]);
    let rc = (RM as u32) << 13;
    let nz = if RM == _MM_FROUND_TO_NEG_INF { DIR_NEG_ZERO.as_ptr() } else { DIR_NO_FIX.as_ptr() };
    let mut csr = [0u32; 2];
    let left: usize;
    macro_rules! go {
        ($r:ident) => {
            dir_asm!(6, $r,
                runs: [runs_check!("ymm14", "ymm15", "ymmword ptr [{rk}]", "ymmword ptr [{rk} + 32]",
                    ["ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7", "ymm8", "ymm9", "ymm10", "ymm11"])],
                    ["dec {runs}", "jnz 3b", "9:"],
                io: (acc, ap, bp.as_ptr(), run, csr, rc),
                nz = in(reg) nz,
                k = in(reg) k.0.as_ptr(),
                rm = const RM,
                run = in(reg) run,
                runs = inout(reg) runs => left,
                rk = in(reg) rk.0.as_ptr(),
            )
        };
    }
    // SAFETY: the loads and stores stay inside acc (96 values), ap (kn*6) and bp
    // (kn*16), asserted above, and the 32-byte constants; MXCSR is restored
    // before the block ends; the clobbered vector registers are declared.
    unsafe {
        match RM {
            _MM_FROUND_TO_ZERO => go!(dir_bf_tz),
            _MM_FROUND_TO_POS_INF => go!(dir_bf_up),
            _ => go!(dir_bf_dn),
        }
    }
    runs - left
}

/// Two 32-byte constants.
#[cfg(target_arch = "x86_64")]
#[repr(C, align(32))]
struct Consts2([[u32; 8]; 2]);

/// The assembly block of [`flush_dir`], rounding with `$r`.
#[cfg(target_arch = "x86_64")]
macro_rules! flush_asm {
    ($r:ident, $($ops:tt)*) => {
        asm!(
            "# constants at {k}, rounding control {rm}",
            mxcsr_enter!(),
            "vxorps ymm12, ymm12, ymm12",
            "2:",
            "vmovups ymm0, ymmword ptr [{c}]",
            "vmovups ymm1, ymmword ptr [{c} + 32]",
            "vaddps ymm0, ymm0, ymmword ptr [{pb}]",
            "vaddps ymm1, ymm1, ymmword ptr [{pb} + 32]",
            $r!("ymm0", "xmm15", "ymm15", "xmm14"),
            $r!("ymm1", "xmm14", "ymm14", "xmm15"),
            dir_store!("ymm0", "0"),
            dir_store!("ymm1", "32"),
            "vmovups ymmword ptr [{pb}], ymm12",
            "vmovups ymmword ptr [{pb} + 32], ymm12",
            "add {c}, 64",
            "add {pb}, 64",
            "dec {kn}",
            "jnz 2b",
            "vldmxcsr dword ptr [{csr}]",
            $($ops)*
            out("ymm0") _, out("ymm1") _, out("ymm12") _, out("ymm14") _, out("ymm15") _,
            options(nostack),
        )
    };
}

/// Chunk totals into a [`tile16_dir`] target `T` in the mode RM (0-3; to
/// nearest-even only into float32, the correctly rounded `vaddps`):
/// `tot = round(tot + row)` lane by lane with the rounding of [`tile16_dir`]
/// (the sum of two f32 values rounded once in RM, then into the format), then
/// `row = 0`. The rounding down sets a -0 total to +0 as [`tile16_dir`] does.
///
/// # Safety
/// The CPU must support avx2, fma and f16c.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn flush_dir<const T: u8, const RM: i32>(tot: &mut [f32], row: &mut [f32], k: &DirConsts) {
    use std::arch::asm;
    use std::arch::x86_64::{_MM_FROUND_TO_NEG_INF, _MM_FROUND_TO_POS_INF, _MM_FROUND_TO_ZERO};
    assert!(T <= 3 && (0..4).contains(&RM) && (RM != 0 || T == 2));
    assert!(tot.len() == row.len() && tot.len().is_multiple_of(16));
    if tot.is_empty() {
        return;
    }
    let rc = (RM as u32) << 13;
    let nz = if RM == _MM_FROUND_TO_NEG_INF { DIR_NEG_ZERO.as_ptr() } else { DIR_NO_FIX.as_ptr() };
    let mut csr = [0u32; 2];
    macro_rules! go {
        ($r:ident) => {
            flush_asm!($r,
                c = inout(reg) tot.as_mut_ptr() => _,
                pb = inout(reg) row.as_mut_ptr() => _,
                kn = inout(reg) tot.len() / 16 => _,
                csr = in(reg) csr.as_mut_ptr(),
                rc = in(reg) rc,
                nz = in(reg) nz,
                k = in(reg) k.0.as_ptr(),
                t = out(reg) _,
                rm = const RM,
            )
        };
    }
    // SAFETY: the loads and stores stay inside tot and row (equal lengths, a
    // multiple of 16, asserted above) and the 32-byte constants; MXCSR is restored
    // before the block ends; the clobbered vector registers are declared.
    unsafe {
        by_dir_rounding!(T, RM, go!())
    }
}

/// [`flush_dir`] for target `to` and rounding control `rm`.
///
/// # Safety
/// As [`flush_dir`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn flush_dir_to(to: DirTo, rm: i32, tot: &mut [f32], row: &mut [f32]) {
    let k = DirConsts::of(to);
    // SAFETY: per the caller.
    unsafe {
        match to {
            DirTo::F16 => by_f16_rounding!(rm, R => flush_dir::<0, R>(tot, row, &k)),
            DirTo::Bf16 | DirTo::Unit(_) => by_f16_rounding!(rm, R => flush_dir::<1, R>(tot, row, &k)),
            DirTo::F32 => by_f16_rounding!(rm, R => flush_dir::<2, R>(tot, row, &k)),
            DirTo::E5m2 => by_f16_rounding!(rm, R => flush_dir::<3, R>(tot, row, &k)),
        }
    }
}

/// One accumulator of a [`tile16_oddz`] step: `$c += a * $b` by the FMA
/// toward zero (into ymm12) and the residual (ymm13), then `$r` rounds it to
/// odd (its last bit set where the residual is nonzero) and to the format to
/// nearest-even. ymm10 holds `a`, ymm14 ones, ymm15 zeros.
#[cfg(target_arch = "x86_64")]
macro_rules! oddz_acc {
    ($r:ident, $c:literal, $b:literal) => {
        concat!(
            "vmovaps ymm12, ", $c, "\n",
            "vfmadd231ps ymm12, ymm10, ", $b, "\n",
            "vsubps ymm13, ", $c, ", ymm12\n",
            "vfmadd231ps ymm13, ymm10, ", $b, "\n",
            $r!($c),
        )
    };
}
/// The sum rounded to odd into `$c`: ymm12 with its last bit set where the
/// residual ymm13 is nonzero (an ordered compare: a NaN residual leaves it).
#[cfg(target_arch = "x86_64")]
macro_rules! oddz_set {
    ($c:literal) => {
        concat!("vcmpps ymm13, ymm13, ymm15, 12\n", "vandps ymm13, ymm13, ymm14\n", "vorps ", $c, ", ymm12, ymm13\n")
    };
}
/// float16: the sum rounded to odd, then `vcvtps2ph` to nearest-even and back.
#[cfg(target_arch = "x86_64")]
macro_rules! oddz_f16 {
    ($c:literal) => {
        concat!(oddz_set!($c), "vcvtps2ph xmm13, ", $c, ", 0\n", "vcvtph2ps ", $c, ", xmm13\n")
    };
}
/// float16 from finite accumulators ([`ODD_F16_FIN`]): as [`oddz_f16`], the
/// last bit set by the unsigned minimum of the residual's pattern and 1.
#[cfg(target_arch = "x86_64")]
macro_rules! oddz_f16_fin {
    ($c:literal) => {
        concat!("vpminud ymm13, ymm13, ymm14\n", "vpor ", $c, ", ymm12, ymm13\n", "vcvtps2ph xmm13, ", $c, ", 0\n", "vcvtph2ps ", $c, ", xmm13\n")
    };
}
/// float8_e5m2: the sum rounded to odd again, at float16 (toward zero, the last
/// bit set when that was inexact; round to odd composes), then nearest-even on
/// the top 8 bits of the float16 pattern (`[{k} + 128]`: 0x0001 halves,
/// `[{k} + 144]` 0x007f, `[{k} + 96]` 0xff00), and back. 11 >= 3 + 2 bits,
/// in e5m2's subnormal range too (float16's has 8 more bits there as well).
#[cfg(target_arch = "x86_64")]
macro_rules! oddz_e5 {
    ($c:literal) => {
        concat!(
            oddz_set!($c),
            "vcvtps2ph xmm13, ", $c, ", 3\n",
            "vcvtph2ps ymm12, xmm13\n",
            "vcmpps ymm12, ymm12, ", $c, ", 12\n",
            "vextracti128 xmm11, ymm12, 1\n",
            "vpackssdw xmm12, xmm12, xmm11\n",
            "vpsrlw xmm12, xmm12, 15\n",
            "vpor xmm13, xmm13, xmm12\n",
            "vpsrlw xmm12, xmm13, 8\n",
            "vpand xmm12, xmm12, xmmword ptr [{k} + 128]\n",
            "vpaddw xmm13, xmm13, xmm12\n",
            "vpaddw xmm13, xmm13, xmmword ptr [{k} + 144]\n",
            "vpand xmm13, xmm13, xmmword ptr [{k} + 96]\n",
            "vcvtph2ps ", $c, ", xmm13\n",
        )
    };
}

/// One accumulator of a six-row [`tile16_oddz`] step into float16: as
/// [`oddz_acc`] with [`oddz_f16`], with twelve accumulators: `a` in ymm12, the
/// sum in ymm13, the residual and its mask in ymm14, zeros and ones read from
/// [`ODD_CONSTS`] (`{z}`). Its chain from one step's accumulator to the next
/// (two FMAs, a subtraction, the conversions) is long: twelve of them in flight
/// keep the vector units busier than eight.
#[cfg(target_arch = "x86_64")]
macro_rules! oddz6_acc {
    ($c:literal, $b:literal) => {
        concat!(
            oddz6_sum!($c, $b),
            "vcmpps ymm14, ymm14, ymmword ptr [{z}], 12\n",
            "vandps ymm14, ymm14, ymmword ptr [{z} + 32]\n",
            oddz6_round!($c),
        )
    };
}

/// [`oddz6_acc`] from finite accumulators ([`ODD_F16_FIN`]): the last bit set
/// by the unsigned minimum of the residual's pattern and 1 (ones at `[{z} + 32]`).
#[cfg(target_arch = "x86_64")]
macro_rules! oddz6_fin_acc {
    ($c:literal, $b:literal) => {
        concat!(oddz6_sum!($c, $b), "vpminud ymm14, ymm14, ymmword ptr [{z} + 32]\n", oddz6_round!($c))
    };
}

/// The sum toward zero (ymm13) and the residual (ymm14) of [`oddz6_acc`].
#[cfg(target_arch = "x86_64")]
macro_rules! oddz6_sum {
    ($c:literal, $b:literal) => {
        concat!(
            "vmovaps ymm13, ", $c, "\n",
            "vfmadd231ps ymm13, ymm12, ", $b, "\n",
            "vsubps ymm14, ", $c, ", ymm13\n",
            "vfmadd231ps ymm14, ymm12, ", $b, "\n",
        )
    };
}

/// The sum (ymm13) with the last bit ymm14 holds (0 or 1) into `$c`, to float16 and back.
#[cfg(target_arch = "x86_64")]
macro_rules! oddz6_round {
    ($c:literal) => {
        concat!("vorps ", $c, ", ymm13, ymm14\n", "vcvtps2ph xmm14, ", $c, ", 0\n", "vcvtph2ps ", $c, ", xmm14\n")
    };
}

/// A row of a tile step as `tile_asm!` calls it: the broadcast `a` at byte
/// `$off` of the strip into `$a`, then `$acc!(c, b)` on both accumulators with
/// B's first and second 8 values `$b0` and `$b1`.
#[cfg(target_arch = "x86_64")]
macro_rules! bcast_row {
    ($acc:ident, $a:literal, $b0:literal, $b1:literal, $off:literal, $c0:literal, $o0:literal, $c1:literal, $o1:literal) => {
        concat!("vbroadcastss ", $a, ", dword ptr [{pa} + ", $off, "]\n", $acc!($c0, $b0), $acc!($c1, $b1))
    };
}

/// One row of a six-row [`tile16_oddz`] step: `$r` ([`oddz6_acc`] or
/// [`oddz6_fin_acc`]) with `a` in ymm12, the first 8 values of B read from
/// `[{pb}]`, the others in ymm15.
#[cfg(target_arch = "x86_64")]
macro_rules! oddz6_row {
    ($r:ident, $($x:tt)*) => { bcast_row!($r, "ymm12", "ymmword ptr [{pb}]", "ymm15", $($x)*) };
}

/// Zeros, then ones (8 lanes each), for [`oddz6_acc`].
#[cfg(target_arch = "x86_64")]
#[repr(C, align(32))]
struct OddConsts([[u32; 8]; 2]);

#[cfg(target_arch = "x86_64")]
static ODD_CONSTS: OddConsts = OddConsts([[0; 8], [1; 8]]);

/// One row of a [`tile16_oddz`] step: the broadcast `a` at byte `$off` of the
/// strip (into ymm10), then [`oddz_acc`] on both accumulators.
#[cfg(target_arch = "x86_64")]
macro_rules! oddz_row {
    ($r:ident, $off:literal, $c0:literal, $o0:literal, $c1:literal, $o1:literal) => {
        concat!(
            "vbroadcastss ymm10, dword ptr [{pa} + ", $off, "]\n",
            oddz_acc!($r, $c0, "ymm8"),
            oddz_acc!($r, $c1, "ymm9"),
        )
    };
}

/// The assembly block of [`tile16_oddz`] for `MR` = 4 or 1 rows, rounding with
/// `$r` (ymm14: ones, ymm15: zeros).
#[cfg(target_arch = "x86_64")]
macro_rules! oddz_asm {
    ($mr:tt, $r:ident, $($ops:tt)*) => {
        tile_asm!($mr,
            setup: ["# constants at {k}", "vpcmpeqd ymm14, ymm14, ymm14", "vpsrld ymm14, ymm14, 31", "vxorps ymm15, ymm15, ymm15"],
            b: (["ymm8"], "ymm9"),
            row: oddz_row($r),
            step: [],
            store: tile_store,
            clobber: ["ymm10", "ymm11", "ymm12", "ymm13", "ymm14", "ymm15"],
            $($ops)*
        )
    };
}

/// The targets of [`tile16_oddz`]: float16, float16 from finite accumulators
/// whose sums stay below its overflow threshold, float8_e5m2.
const ODD_F16: u8 = 0;
const ODD_F16_FIN: u8 = 1;
const ODD_E5M2: u8 = 2;

/// The nearest-even tile kernel of [`Kind16::Odd`] into float16 or
/// float8_e5m2 (`T`: [`ODD_F16`], [`ODD_F16_FIN`], [`ODD_E5M2`]; bfloat16's is [`tile16_unit`] with `ODD`
/// at bit 16), `MR` rows (1 or 4, or 6 into float16: [`oddz6_acc`]): as [`tile16`] with `K_ODD`, the round-to-odd
/// computed with MXCSR rounding toward zero. With `p = a*b` exact in f32 (the exponent scan of the block)
/// and `x = acc + p`: `y = RZ(x)` by the FMA, `t = RZ(acc - y)`, `d = RZ(p + t)`
/// by the FMA again; `d != 0` exactly when `x != y`. If `x == y`, `acc - y = -p`
/// is an f32, so `t = -p` and `d = 0`. If not, `t = -p` would need
/// `RZ(err - p) = -p` with `err = x - y` of the sign of x: with p of that sign
/// too, `|err - p| < |p|`; with p of the other sign, either
/// `|p| > |acc| / 2` and the sum is exact (Sterbenz), or `|y| >= |p|`, so
/// `err` is a nonzero multiple of p's unit and `|err - p|` reaches the next
/// f32 above `|p|`. A nonzero `p + t` of two f32 values never truncates to 0.
/// So `y` with its last bit set when `d != 0` is the sum rounded to odd at 24
/// bits, and rounding it to the format to nearest-even is exact. An infinite or
/// NaN `d` (infinite operands) leaves `y` alone; exact zero sums are +0 as
/// to nearest. All of it runs in one assembly block that restores MXCSR.
///
/// [`ODD_F16_FIN`] ([`Kind16::OddFin`]) sets the last bit with the unsigned
/// minimum of `d`'s pattern and 1 (two operations, where the compare, the mask
/// and the `or` are three, and a shorter chain from one step's accumulator to
/// the next: about 15% faster). `d` is never -0: toward zero, a zero sum is +0
/// unless both terms are -0, and `t = -0` needs a -0 accumulator and `y` = +0,
/// so a +0 product. But an infinite `y` (an infinite accumulator) makes `d` a
/// NaN, whose pattern would set the last bit of the infinity: the caller runs
/// it only on depth blocks whose accumulators are finite and whose sums stay
/// below float16's overflow threshold ([`near_ok`]).
///
/// # Safety
/// The CPU must support avx2, fma and f16c; `ap` holds kn*MR values, `bp`
/// [`strips_len`]`(MR, sw, kn)`: with `sw` = 0 one strip of kn*16 that every
/// row reads, else (four rows) row r's strip at `bp[r * sw..]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile16_oddz<const MR: usize, const T: u8>(acc: &mut [f32], ap: &[f32], b: BSrc, kn: usize) {
    use std::arch::asm;
    let (bp, sw) = b.packed();
    assert!(T <= ODD_E5M2 && (MR == 1 || MR == 4 || MR == 6 && T != ODD_E5M2 && sw == 0));
    assert!(acc.len() >= MR * 16 && ap.len() >= kn * MR && (matches!(b, BSrc::Codes { .. }) || bp.len() >= strips_len(MR, sw, kn)));
    if kn == 0 {
        return;
    }
    // Toward zero.
    let rc = 3u32 << 13;
    let mut csr = [0u32; 2];
    macro_rules! go {
        ($mr:tt, $r:ident) => {
            go!($mr, $r, bp.as_ptr())
        };
        ($mr:tt, $r:ident, $bp:expr) => {
            oddz_asm!($mr, $r,
                io: (acc, ap, $bp, kn, csr, rc),
                k = in(reg) DIR_CONSTS.0.as_ptr(),
            )
        };
    }
    if let BSrc::Codes { p: codes, ld, code, strips } = b {
        assert!((MR == 1 || MR == 4) && T != ODD_E5M2 && code_bytes(code) == 2);
        let (bs, f16) = (ld * 2, code == CODE_F16);
        // SAFETY: per the caller, B's codes of the kn steps (16 * MR from `codes`, `ld`
        // apart) are readable; the stores stay inside acc (asserted), the loads inside
        // ap and the constants; MXCSR is restored before the block ends; the clobbered
        // vector registers are declared.
        unsafe {
            match (MR, T, f16) {
                (4, ODD_F16, false) if strips => go!((in4s, bf16, bs), oddz_f16, codes),
                (4, _, false) if strips => go!((in4s, bf16, bs), oddz_f16_fin, codes),
                (4, ODD_F16, false) => go!((in4, bf16, bs), oddz_f16, codes),
                (4, _, false) => go!((in4, bf16, bs), oddz_f16_fin, codes),
                (_, ODD_F16, false) => go!((in1, bf16, bs), oddz_f16, codes),
                (_, _, false) => go!((in1, bf16, bs), oddz_f16_fin, codes),
                (4, ODD_F16, true) if strips => go!((in4s, f16, bs), oddz_f16, codes),
                (4, _, true) if strips => go!((in4s, f16, bs), oddz_f16_fin, codes),
                (4, ODD_F16, true) => go!((in4, f16, bs), oddz_f16, codes),
                (4, _, true) => go!((in4, f16, bs), oddz_f16_fin, codes),
                (_, ODD_F16, true) => go!((in1, f16, bs), oddz_f16, codes),
                (_, _, true) => go!((in1, f16, bs), oddz_f16_fin, codes),
            }
        }
        return;
    }
    // SAFETY: the loads and stores stay inside acc (MR*16 values), ap (kn*MR) and
    // bp (strips_len(MR, sw, kn)), asserted above, and the constants; MXCSR is restored before the
    // block ends; the clobbered vector registers are declared.
    unsafe {
        let (swb, sw3b) = (sw * 4, sw * 12);
        match (MR, T) {
            (4, ODD_F16) if sw != 0 => go!((w4, swb, sw3b), oddz_f16),
            (4, ODD_F16_FIN) if sw != 0 => go!((w4, swb, sw3b), oddz_f16_fin),
            (4, _) if sw != 0 => go!((w4, swb, sw3b), oddz_e5),
            (6, _) => {
                macro_rules! six {
                    ($acc:ident) => {
                        tile_asm!(6,
                            setup: [],
                            b: ([], "ymm15"),
                            row: oddz6_row($acc),
                            step: [],
                            store: tile_store,
                            clobber: ["ymm12", "ymm13", "ymm14"],
                            io: (acc, ap, bp.as_ptr(), kn, csr, rc),
                            z = in(reg) ODD_CONSTS.0.as_ptr(),
                        )
                    };
                }
                if T == ODD_F16_FIN {
                    six!(oddz6_fin_acc)
                } else {
                    six!(oddz6_acc)
                }
            }
            (4, ODD_F16) => go!(4, oddz_f16),
            (4, ODD_F16_FIN) => go!(4, oddz_f16_fin),
            (4, _) => go!(4, oddz_e5),
            (_, ODD_F16) => go!(1, oddz_f16),
            (_, ODD_F16_FIN) => go!(1, oddz_f16_fin),
            _ => go!(1, oddz_e5),
        }
    }
}

/// `$go!($mr, u)` with the literal `u` = `$unit` (13 to 21), the unit bit of
/// [`tile16_unit`] with `ODD` and [`tile16_unit`].
#[cfg(target_arch = "x86_64")]
macro_rules! by_unit_bit {
    ($unit:expr, $go:ident, $mr:tt $(, $bp:expr)?) => {
        match $unit {
            13 => $go!($mr, 13 $(, $bp)?),
            14 => $go!($mr, 14 $(, $bp)?),
            15 => $go!($mr, 15 $(, $bp)?),
            16 => $go!($mr, 16 $(, $bp)?),
            17 => $go!($mr, 17 $(, $bp)?),
            18 => $go!($mr, 18 $(, $bp)?),
            19 => $go!($mr, 19 $(, $bp)?),
            20 => $go!($mr, 20 $(, $bp)?),
            _ => $go!($mr, 21 $(, $bp)?),
        }
    };
}

/// One accumulator of a [`tile16_unit`] step with `ODD`: `$c += a * $b`
/// rounded to odd at 24 bits as [`oddz_acc`] does, then to nearest-even at
/// bit `{u}`: plus 2^(u-1) - 1 (`[{k} + 32]`) and the parity of bit u, the
/// bits below u cleared (`[{k} + 64]`). Setting the sum's last bit where it
/// was inexact only matters when its bits below u are exactly 2^(u-1), where
/// it carries as an odd bit u does, so the sticky bit joins the parity
/// instead: `y + 2^(u-1) - 1 + (bit u | sticky)`. The sticky bit is the
/// unsigned minimum of the residual's pattern and 1 (ymm14: ones), nonzero
/// exactly when the residual is: it is never -0 (toward zero, an exact zero
/// sum is +0 unless both terms are -0, and `t = -0` needs a -0 accumulator
/// and a +0 product), and a NaN residual from infinite operands sets it, which
/// leaves an infinite sum infinite (0x7f800000 plus 2^(u-1) stays below the
/// next unit). The parity and the sum plus 2^(u-1) - 1 are taken while the
/// residual is computed: the chain from one step's accumulator to the next is
/// the FMA, the subtraction, the FMA and four integer operations. ymm10 holds
/// `a`; ymm11-ymm13 scratch.
#[cfg(target_arch = "x86_64")]
macro_rules! oddu_acc {
    ($c:literal, $b:literal) => {
        concat!(
            "vmovaps ymm12, ", $c, "\n",
            "vfmadd231ps ymm12, ymm10, ", $b, "\n",
            "vsubps ymm13, ", $c, ", ymm12\n",
            "vpsrld ymm11, ymm12, {u}\n",
            "vpand ymm11, ymm11, ymm14\n",
            "vpaddd ", $c, ", ymm12, ymmword ptr [{k} + 32]\n",
            "vfmadd231ps ymm13, ymm10, ", $b, "\n",
            "vpminud ymm13, ymm13, ymm14\n",
            "vpor ymm11, ymm11, ymm13\n",
            "vpaddd ", $c, ", ", $c, ", ymm11\n",
            "vpand ", $c, ", ", $c, ", ymmword ptr [{k} + 64]\n",
        )
    };
}

/// One row of a [`tile16_unit`] step with `ODD`: [`oddu_acc`] with `a` in
/// ymm10, B's values in ymm8 and ymm9 ([`bcast_row`]).
#[cfg(target_arch = "x86_64")]
macro_rules! oddu_row {
    ($r:ident, $($x:tt)*) => { bcast_row!(oddu_acc, "ymm10", "ymm8", "ymm9", $($x)*) };
}

/// One row of a [`tile16_unit`] step: the broadcast `a` at byte `$off` of the
/// strip (into ymm14), two FMAs, each sum rounded by `une_round!`.
#[cfg(target_arch = "x86_64")]
macro_rules! une_row {
    ($r:ident, $off:literal, $c0:literal, $o0:literal, $c1:literal, $o1:literal) => {
        concat!(
            "vbroadcastss ymm14, dword ptr [{pa} + ", $off, "]\n",
            "vfmadd231ps ", $c0, ", ymm14, ymm12\n",
            "vfmadd231ps ", $c1, ", ymm14, ymm13\n",
            une_round!($c0),
            une_round!($c1),
        )
    };
}

/// Nearest-even of the pattern in `$c` at bit `{u}`: plus 2^(u-1) - 1
/// (ymm9) plus its bit u (ymm8: ones), the bits below u cleared (ymm10: the
/// mask); ymm15 scratch.
#[cfg(target_arch = "x86_64")]
macro_rules! une_round {
    ($c:literal) => {
        concat!(
            "vpsrld ymm15, ", $c, ", {u}\n",
            "vpand ymm15, ymm15, ymm8\n",
            "vpaddd ", $c, ", ", $c, ", ymm9\n",
            "vpaddd ", $c, ", ", $c, ", ymm15\n",
            "vpand ", $c, ", ", $c, ", ymm10\n",
        )
    };
}

/// The nearest-even tile kernels at a unit bit `unit` (13 to 21) of the f32
/// pattern, `MR` (1 or 4) rows, as [`tile16`]; their constants are ones,
/// 2^(u-1) - 1 and the mask of the bits from the unit up.
///
/// Without `ODD`, [`Kind16::UnitNe`]'s, on the scaled values' patterns
/// ([`unit_scale`]): each add the FMA (MXCSR to nearest, flush-to-zero and
/// denormals-are-zero off: the scaled subnormals must stay) and the integer
/// nearest-even rounding of the sum's pattern at that bit, on its magnitude
/// bits (the sign stays, a -0 too; a carry reaches the exponent). Six vector
/// operations an add, its constants in registers: four rows leave three of
/// the sixteen free (with six rows and the constants as memory operands, the
/// loads held it about 10% slower).
///
/// With `ODD`, [`Kind16::OddUnit`]'s on the values scaled by [`unit_scale`],
/// and [`Kind16::Odd`]'s into bfloat16 (bit 16, unscaled: its subnormals are
/// f32's): [`tile16_oddz`]'s round to odd (the FMA toward zero and the
/// residual FMA, with every scaled product an exact f32: the argument holds
/// with subnormal sums too, whose arithmetic is exact on the 2^-149 grid),
/// then the integer nearest-even rounding at that bit ([`oddu_acc`]). Round
/// to odd at 24 bits (or at 2^-149) then to nearest at 11 or fewer (or at
/// 2^(-126 - man), 13 or more bits up) is the single rounding.
///
/// # Safety
/// The CPU must support avx2 and fma; `ap` holds kn*MR values, `bp`
/// [`strips_len`]`(MR, sw, kn)`: with `sw` = 0 one strip of kn*16 that every
/// row reads, else (four rows) row r's strip at `bp[r * sw..]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile16_unit<const MR: usize, const ODD: bool>(acc: &mut [f32], ap: &[f32], b: BSrc, kn: usize, unit: u32) {
    use std::arch::asm;
    let (bp, sw) = b.packed();
    assert!(MR == 1 || MR == 4);
    assert!(acc.len() >= MR * 16 && ap.len() >= kn * MR && (matches!(b, BSrc::Codes { .. }) || bp.len() >= strips_len(MR, sw, kn)));
    assert!((13..=21).contains(&unit));
    if kn == 0 {
        return;
    }
    // Ones, 2^(u-1) - 1, the mask of the bits from the unit up; at bytes 160 and 176
    // the constants of e4m3fn codes read in place (`code_load!`, as [`DirConsts`]).
    #[repr(C, align(32))]
    struct Consts([u32; 52]);
    let low = (1u32 << unit) - 1;
    let k = Consts(std::array::from_fn(|i| match i / 8 {
        0 => 1,
        1 => low >> 1,
        2 => !low,
        _ if i / 4 == 10 => 0xbfff_bfff,
        _ if i >= 44 => 0x4380_0000,
        _ => 0,
    }));
    // Round to odd toward zero, else to nearest.
    let rc = if ODD { 3u32 << 13 } else { 0 };
    let mut csr = [0u32; 2];
    macro_rules! go {
        ($mr:tt, $u:literal) => {
            go!($mr, $u, bp.as_ptr())
        };
        ($mr:tt, $u:literal, $bp:expr) => {
            if ODD {
                tile_asm!($mr,
                    setup: ["vpcmpeqd ymm14, ymm14, ymm14", "vpsrld ymm14, ymm14, 31"],
                    b: (["ymm8"], "ymm9"),
                    row: oddu_row(oddu),
                    step: [],
                    store: tile_store,
                    clobber: ["ymm10", "ymm11", "ymm12", "ymm13", "ymm14"],
                    io: (acc, ap, $bp, kn, csr, rc),
                    k = in(reg) k.0.as_ptr(),
                    u = const $u,
                )
            } else {
                go_ne!($mr, $u, $bp)
            }
        };
    }
    // (Nearest-even, without `ODD`: also on float8 codes in place.)
    macro_rules! go_ne {
        ($mr:tt, $u:literal, $bp:expr) => {
            tile_asm!($mr,
                setup: ["vmovdqa ymm8, ymmword ptr [{k}]", "vmovdqa ymm9, ymmword ptr [{k} + 32]", "vmovdqa ymm10, ymmword ptr [{k} + 64]"],
                b: (["ymm12"], "ymm13"),
                row: une_row(une),
                step: [],
                store: tile_store,
                clobber: ["ymm8", "ymm9", "ymm10", "ymm14", "ymm15"],
                io: (acc, ap, $bp, kn, csr, rc),
                k = in(reg) k.0.as_ptr(),
                u = const $u,
            )
        };
    }
    if let BSrc::Codes { p: codes, ld: bs, code: code @ (CODE_E5M2 | CODE_E4M3FN), strips } = b {
        // (Nearest-even at the unit from fp8 products, scaled, whose FMA is exact.)
        assert!(!ODD);
        let e4m3 = code == CODE_E4M3FN;
        // SAFETY: per the caller, B's codes of the kn steps (16 * MR from `codes`, `bs`
        // bytes apart) are readable; the stores stay inside acc (asserted), the loads
        // inside ap and the constants; MXCSR is restored before the block ends; the
        // clobbered vector registers are declared.
        unsafe {
            match (MR, e4m3, strips) {
                (4, false, true) => by_unit_bit!(unit, go_ne, (in4s, e5m2, bs), codes),
                (4, true, true) => by_unit_bit!(unit, go_ne, (in4s, e4m3, bs), codes),
                (4, false, false) => by_unit_bit!(unit, go_ne, (in4, e5m2, bs), codes),
                (4, true, false) => by_unit_bit!(unit, go_ne, (in4, e4m3, bs), codes),
                (_, false, _) => by_unit_bit!(unit, go_ne, (in1, e5m2, bs), codes),
                _ => by_unit_bit!(unit, go_ne, (in1, e4m3, bs), codes),
            }
        }
        return;
    }
    if let BSrc::Codes { p: codes, ld, code, strips } = b {
        // (Nearest-even at bfloat16's unit from the sum rounded to odd, unscaled.)
        assert!(ODD && unit == 16);
        let (bs, f16) = (ld * 2, code == CODE_F16);
        // SAFETY: per the caller, B's codes of the kn steps (16 * MR from `codes`, `ld`
        // apart) are readable; the stores stay inside acc (asserted), the loads inside
        // ap and the constants; MXCSR is restored before the block ends; the clobbered
        // vector registers are declared.
        unsafe {
            match (MR, f16, strips) {
                (4, false, true) => go!((in4s, bf16, bs), 16, codes),
                (4, true, true) => go!((in4s, f16, bs), 16, codes),
                (4, false, false) => go!((in4, bf16, bs), 16, codes),
                (4, true, false) => go!((in4, f16, bs), 16, codes),
                (_, false, _) => go!((in1, bf16, bs), 16, codes),
                _ => go!((in1, f16, bs), 16, codes),
            }
        }
        return;
    }
    // SAFETY: the loads and stores stay inside acc (MR*16 values), ap (kn*MR),
    // bp (strips_len(MR, sw, kn)) and the constants; MXCSR is restored before the block ends; the
    // clobbered vector registers are declared.
    unsafe {
        let (swb, sw3b) = (sw * 4, sw * 12);
        if MR == 4 && sw != 0 {
            by_unit_bit!(unit, go, (w4, swb, sw3b))
        } else if MR == 4 {
            by_unit_bit!(unit, go, 4)
        } else {
            by_unit_bit!(unit, go, 1)
        }
    }
}

/// The random bits of [`flush_sr`]: from the Weyl states in
/// `$t`, `mix32` (`[{k}]`, `[{k} + 32]`: its multipliers) without its last
/// xor-shift (`$m` = `sr`; the top 16 bits are the same) or with it (`srf`),
/// then the complement of the top `rbits` bits (`[{k} + 64]` keeps them)
/// shifted right by `{sh}`, to just below the unit; `$u` scratch.
#[cfg(target_arch = "x86_64")]
macro_rules! sr_comp {
    ($m:ident, $t:literal, $u:literal) => {
        concat!(
            "vpsrld ", $u, ", ", $t, ", 16\n",
            "vpxor ", $t, ", ", $t, ", ", $u, "\n",
            "vpmulld ", $t, ", ", $t, ", ymmword ptr [{k}]\n",
            "vpsrld ", $u, ", ", $t, ", 15\n",
            "vpxor ", $t, ", ", $t, ", ", $u, "\n",
            "vpmulld ", $t, ", ", $t, ", ymmword ptr [{k} + 32]\n",
            sr_last!($m, $t, $u),
            "vpandn ", $t, ", ", $t, ", ymmword ptr [{k} + 64]\n",
            "vpsrld ", $t, ", ", $t, ", {sh}\n",
        )
    };
}

/// The last xor-shift of `mix32` in `sr_comp!`: none (`sr`) or `$t ^= $t >> 16` (`srf`).
#[cfg(target_arch = "x86_64")]
macro_rules! sr_last {
    (sr, $t:literal, $u:literal) => {
        ""
    };
    (srf, $t:literal, $u:literal) => {
        concat!("vpsrld ", $u, ", ", $t, ", 16\n", "vpxor ", $t, ", ", $t, ", ", $u, "\n")
    };
}

/// Constants of [`flush_sr`] ([`sr_comp`]): mix32's
/// multipliers, the top `rbits` bits, the bits from the unit up, the Weyl step.
#[cfg(target_arch = "x86_64")]
#[repr(C, align(32))]
struct SrConsts([[u32; 8]; 5]);

#[cfg(target_arch = "x86_64")]
impl SrConsts {
    fn new(rbits: u32, unit: u32, gamma: u32) -> Self {
        SrConsts([[0x7feb_352d; 8], [0x846c_a68b; 8], [u32::MAX << (32 - rbits); 8], [u32::MAX << unit; 8], [gamma; 8]])
    }
}

/// `$go!($pre, sh)` (or `$go!(sh)`) with the literal `sh` = 32 - `$unit` (11 to 19), the
/// shift right that puts the random bits just below a unit 13 to 21 bits up.
#[cfg(target_arch = "x86_64")]
macro_rules! by_sr_shift {
    ($unit:expr, $go:ident $(, $pre:tt)*) => {
        match 32 - $unit {
            11 => $go!($($pre,)* 11),
            12 => $go!($($pre,)* 12),
            13 => $go!($($pre,)* 13),
            14 => $go!($($pre,)* 14),
            15 => $go!($($pre,)* 15),
            16 => $go!($($pre,)* 16),
            17 => $go!($($pre,)* 17),
            18 => $go!($($pre,)* 18),
            19 => $go!($($pre,)* 19),
            _ => unreachable!("a unit 13 to 21 bits up"),
        }
    };
}


/// The accumulator registers `$c` multiplied by the 8 f32 lanes at byte `$off`
/// of the constants `{k}` (the scale of [`tile16_sr`]'s accumulators: a power of
/// two, exact on the format's values).
#[cfg(target_arch = "x86_64")]
macro_rules! sr_scale_by {
    ($off:literal, $($c:literal),*) => {
        concat!($("vmulps ", $c, ", ", $c, ", ymmword ptr [{k} + ", $off, "]\n"),*)
    };
}

/// Is `sc` a power of two whose inverse is a normal f32 too (a scale the
/// stochastic kernels apply and undo exactly)?
fn sc_ok(sc: f32) -> bool {
    sc.is_normal() && sc > 0.0 && sc.to_bits() & 0x7f_ffff == 0 && (1.0 / sc).is_normal()
}

/// Store of accumulator `$c` at byte `$off` of the tile, and of the largest
/// magnitude pattern (ymm12) at `{mx}`.
#[cfg(target_arch = "x86_64")]
macro_rules! track_store {
    ($c:literal, $off:literal) => {
        concat!("vmovups ymmword ptr [{c} + ", $off, "], ", $c, "\n", "vmovdqu ymmword ptr [{mx}], ymm12\n")
    };
}

/// [`tile16_sr`]'s kinds: plain, watching its sums, finding ties.
const SR_PLAIN: u8 = 0;
const SR_TRACK: u8 = 1;
const SR_TIES: u8 = 2;

/// The stochastic tile kernel of [`Kind16::Sr`] into a format whose unit sits
/// `unit` bits up the f32 pattern of its normal values ([`SrFmt`]: 13 to 21),
/// `MR` (1 or 4) rows: as [`tile16`], each add `acc = SR(acc + a*b)` with R
/// random bits (1 to `unit`). `2^R - 1 - rand` of row r, column c at step t,
/// placed just below the unit, is `up[t*MR + r] ^ vp[t*16 + c]`: the row's
/// complemented bits and the column's bits ([`StepRand`]), each placed by the
/// caller. Four vector operations an add (xor, FMA, add, and).
///
/// With `W` = [`SR_TRACK`] the kernel watches its sums instead of relying on a bound
/// ([`block_ok`]): it returns the largest magnitude of any rounded sum, as an
/// f32 bit pattern (0 with [`SR_PLAIN`]). It returns too whether some FMA was
/// inexact (MXCSR's precision flag): the f32 sums then were not all the exact
/// ones, which more random bits than the remainder's top `unit` would read
/// ([`Kind16::Sr`]'s wide bits). The caller compares it with the
/// format's largest value, scaled: past it the tile's result is void, as every
/// sum beyond the largest value must round to an infinity or stop at that
/// value, which the integer rounding does not. Six operations an add: a mask
/// and an unsigned maximum more.
///
/// With [`SR_TIES`] it returns instead whether some add met a tie: the
/// remainder's top `unit` bits equal to the word's, so that their sum below
/// the unit is all ones. Only there do the bits below them decide (the
/// remainder's, zeros in an f32 sum, against the word's), so a tile whose
/// FMAs were inexact but met no tie has the wide bits' result. Seven
/// operations an add.
///
/// The FMA toward zero (MXCSR, inside the assembly block) is the exact sum
/// `x` truncated to 24 bits, so its bits below the format's unit (in its
/// normal range) are the top bits of x's remainder there: adding `2^R - 1 -
/// rand` to the pattern carries into the unit exactly when `rand` is below
/// the top R bits of the remainder, the f64 path's decision ([`Fast::round`]),
/// and the truncation that follows keeps the unit. On the signed pattern the
/// carry grows the magnitude, to the neighbour away from zero. The values
/// are scaled by [`unit_scale`] (A's and B's by the caller; the accumulators
/// by the kernel, times `sc` after loading them and divided by it before
/// storing them, exact for a power of two on the format's grid; 1 leaves
/// them): sums in the format's subnormal range
/// are then f32 subnormals, truncated at 2^-149 by the FMA, whose unit bit is
/// the same bit of the pattern, so the same add-and-truncate rounds them at
/// their fixed unit, as the f64 path's rounding does. Exact zero sums are +0
/// toward zero, as in the f64 path; a nonzero sum is at least the smallest
/// subnormal, so no truncation makes a -0. The caller keeps every sum below
/// the largest value ([`block_ok`]), so no rounding passes it, or watches them.
///
/// # Safety
/// The CPU must support avx2 and fma; `ap`, `up` hold kn*MR values, `bp`, `vp` kn*16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile16_sr<const MR: usize, const W: u8>(acc: &mut [f32], ap: &[f32], bp: &[f32], up: &[u32], vp: &[u32], kn: usize, unit: u32, sc: f32) -> (u32, bool) {
    use std::arch::asm;
    assert!((MR == 1 || MR == 4) && W <= SR_TIES);
    assert!(acc.len() >= MR * 16 && ap.len() >= kn * MR && bp.len() >= kn * 16 && up.len() >= kn * MR && vp.len() >= kn * 16);
    assert!((13..=21).contains(&unit) && sc_ok(sc));
    if kn == 0 {
        return (0, false);
    }
    // The mask that truncates at the unit; the magnitude bits (with SR_TIES: the
    // bits below the unit); the scale and its inverse.
    let second = if W == SR_TIES { !(u32::MAX << unit) } else { 0x7fff_ffff };
    let k = [[u32::MAX << unit; 8], [second; 8], [sc.to_bits(); 8], [(1.0 / sc).to_bits(); 8]];
    let mut mx = [0u32; 8];
    // Toward zero.
    let rc = 3u32 << 13;
    let mut csr = [0u32; 2];
    macro_rules! go {
        ($mr:tt, $st:literal, $setup:tt, $b:tt, $r:ident, $store:ident, $sin:tt, $sout:tt, $($mx:tt)*) => {
            tile_asm!($mr,
                setup: $setup,
                b: $b,
                row: sr_row($r),
                step: [concat!("add {pu}, ", $st), "add {pv}, 64"],
                store: $store,
                clobber: ["ymm10", "ymm11", "ymm12", "ymm13", "ymm14", "ymm15"],
                scale: $sin, $sout,
                io: (acc, ap, bp.as_ptr(), kn, csr, rc),
                k = in(reg) k.as_ptr(),
                pu = inout(reg) up.as_ptr() => _,
                pv = inout(reg) vp.as_ptr() => _,
                $($mx)*
            )
        };
        ($mr:tt, $st:literal, plain, $sin:tt, $sout:tt) => {
            go!($mr, $st, ["vmovdqu ymm15, ymmword ptr [{k}]"],
                (["ymm8"], "ymm9", "vmovdqu ymm12, ymmword ptr [{pv}]", "vmovdqu ymm13, ymmword ptr [{pv} + 32]"),
                plain, tile_store, $sin, $sout,)
        };
        ($mr:tt, $st:literal, $kind:ident, $sin:tt, $sout:tt) => {
            go!($mr, $st, ["vmovdqu ymm15, ymmword ptr [{k}]", "vmovdqu ymm13, ymmword ptr [{k} + 32]", "vpxor ymm12, ymm12, ymm12"],
                (["ymm8"], "ymm9"), $kind, track_store, $sin, $sout, mx = in(reg) mx.as_mut_ptr(),)
        };
        (4, $st:literal, $kind:ident) => {
            go!(4, $st, $kind, [sr_scale_by!("64", "ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7")],
                [sr_scale_by!("96", "ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7")])
        };
        (1, $st:literal, $kind:ident) => {
            go!(1, $st, $kind, [sr_scale_by!("64", "ymm0", "ymm1")], [sr_scale_by!("96", "ymm0", "ymm1")])
        };
    }
    // SAFETY: the loads and stores stay inside acc (MR*16 values), ap and up
    // (kn*MR), bp and vp (kn*16), the constants and mx; MXCSR is restored before
    // the block ends; the clobbered vector registers are declared.
    unsafe {
        match (MR == 4, W) {
            (true, SR_PLAIN) => go!(4, "16", plain),
            (true, SR_TRACK) => go!(4, "16", track),
            (true, _) => go!(4, "16", ties),
            (false, SR_PLAIN) => go!(1, "4", plain),
            (false, SR_TRACK) => go!(1, "4", track),
            (false, _) => go!(1, "4", ties),
        }
    }
    (mx.into_iter().max().unwrap_or(0), csr[1] & MXCSR_PE != 0)
}

/// [`tile16_sr`] (4 rows, not watching) in runs of `run` steps, checked before
/// each run: `runs` runs while the largest accumulator magnitude, as an f32
/// pattern, stays at most `top` (the caller's bound: from there no sum of a
/// run can pass the largest value). Returns the runs done (the tile holds
/// their sums) and whether some FMA was inexact, as [`tile16_sr`]. A check
/// costs about 19 operations a run, where watching every sum ([`tile16_sr`]
/// with `TRACK`) costs 16 a step.
///
/// # Safety
/// The CPU must support avx2 and fma; `ap`, `up` hold runs*run*4 values, `bp`,
/// `vp` runs*run*16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile16_sr_runs(acc: &mut [f32], ap: &[f32], bp: &[f32], up: &[u32], vp: &[u32], runs: usize, run: usize, unit: u32, top: u32, sc: f32) -> (usize, bool) {
    use std::arch::asm;
    let kn = runs * run;
    assert!(acc.len() >= 64 && ap.len() >= kn * 4 && bp.len() >= kn * 16 && up.len() >= kn * 4 && vp.len() >= kn * 16);
    assert!((13..=21).contains(&unit) && run >= 1 && top < 0x7f80_0000 && sc_ok(sc));
    if runs == 0 {
        return (0, false);
    }
    // The mask that truncates at the unit; the magnitude bits; the bound; the scale and its inverse.
    let k = [[u32::MAX << unit; 8], [0x7fff_ffff; 8], [top; 8], [sc.to_bits(); 8], [(1.0 / sc).to_bits(); 8]];
    // Toward zero.
    let rc = 3u32 << 13;
    let mut csr = [0u32; 2];
    let left: usize;
    // SAFETY: the loads and stores stay inside acc (64 values), ap and up
    // (kn*4), bp and vp (kn*16) and the constants; MXCSR is restored before the
    // block ends; the clobbered vector registers are declared.
    unsafe {
        tile_asm!(4,
            setup: ["vmovdqu ymm15, ymmword ptr [{k}]"],
            b: (["ymm8"], "ymm9", "vmovdqu ymm12, ymmword ptr [{pv}]", "vmovdqu ymm13, ymmword ptr [{pv} + 32]"),
            row: sr_row(plain),
            step: ["add {pu}, 16", "add {pv}, 64"],
            store: tile_store,
            clobber: ["ymm10", "ymm11", "ymm12", "ymm13", "ymm14", "ymm15"],
            scale: [sr_scale_by!("96", "ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7")],
                [sr_scale_by!("128", "ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7")],
            runs: [runs_check!("ymm10", "ymm11", "ymmword ptr [{k} + 32]", "ymmword ptr [{k} + 64]",
                ["ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7"])],
                ["dec {runs}", "jnz 3b", "9:"],
            io: (acc, ap, bp.as_ptr(), run, csr, rc),
            k = in(reg) k.as_ptr(),
            pu = inout(reg) up.as_ptr() => _,
            pv = inout(reg) vp.as_ptr() => _,
            run = in(reg) run,
            runs = inout(reg) runs => left,
        );
    }
    (runs - left, csr[1] & MXCSR_PE != 0)
}

/// [`tile16_sr`] of `MR` rows where no bound on the depth block keeps the sums
/// below the largest value: `true` when none passed it (`top`: its scaled
/// pattern), and whether some FMA was inexact ([`tile16_sr`]). With `runs` =
/// (run, bound) and 4 rows, runs checked at their starts ([`tile16_sr_runs`])
/// while the bound holds, then the watching kernel.
///
/// # Safety
/// As [`tile16_sr`]'s.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn sr_watched<const MR: usize>(t: &mut [f32], ap: &[f32], bp: &[f32], up: &[u32], vp: &[u32], len: usize, unit: u32, top: u32, runs: Option<(usize, u32)>, sc: f32) -> (bool, bool) {
    let (mut done, mut inexact) = (0, false);
    if let (4, Some((run, bound))) = (MR, runs) {
        // SAFETY: forwarded contract; the runs cover at most len steps.
        let (r, ie) = unsafe { tile16_sr_runs(t, ap, bp, up, vp, len / run, run, unit, bound, sc) };
        (done, inexact) = (r * run, ie);
    }
    if done == len {
        return (true, inexact);
    }
    // SAFETY: forwarded contract, from step `done`.
    let (mx, ie) = unsafe { tile16_sr::<MR, SR_TRACK>(t, &ap[done * MR..], &bp[done * 16..], &up[done * MR..], &vp[done * 16..], len - done, unit, sc) };
    (mx <= top, inexact | ie)
}

/// [`tile16_dir_runs`] over `len` steps, in stages of shorter runs: each stage
/// (run, bound) of `plan` runs as many of its runs as fit in the steps left,
/// until a check fails; the next stage goes on from there. Returns the steps done.
///
/// # Safety
/// As [`tile16_dir_runs`]'s, with 6 rows and kn = len.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn dir_checked(to: DirTo, rm: i32, t: &mut [f32], ap: &[f32], bp: &[f32], len: usize, plan: &[Option<(usize, u32)>]) -> usize {
    let mut done = 0;
    for &(run, top) in plan.iter().flatten() {
        let runs = (len - done) / run;
        // SAFETY: forwarded contract; the runs cover at most the steps left.
        done += unsafe { by_f16_rounding!(rm, R => tile16_dir_runs::<R>(to, t, &ap[done * 6..], &bp[done * 16..], runs, run, top)) } * run;
        if done == len {
            break;
        }
    }
    done
}

/// May a depth block rounding up (or down) into a [`DirTo::Unit`] format run
/// the kernel at the format's unit with no bound on its sums? That kernel
/// rounds onto the format's grid extended past the largest value with no
/// limit on its exponent. Where every product is below 2^(emax - man), the
/// unit of the grid's top binade (`top` / 2^prec, `top` the power of two
/// above the largest value), it agrees with the format:
/// - Rounding up, a sum at least -max (every value of the format) plus such
///   a product lies above -max - unit, and rounds up to at least -max: the
///   kernel's sums never pass the largest value on the negative side, where
///   the format's overflow would stop them at it.
/// - On the positive side, a sum past the largest value (the format's
///   overflow: +inf) is at least `top`, and plus such a product lies above
///   the largest value, so it rounds up to at least `top` again: it stays
///   there, as +inf stays +inf, and [`dir_sided`] sets it to +inf after the
///   call.
/// - Rounding down, the mirror image.
///
/// `a_hi`: |a| < 2^a_hi for A's finite values in the block (`None`: none
/// nonzero; the caller refuses A's infinities and NaNs), `b_max` the largest
/// |b| (NaN or inf when a value is: refused, unless A's values are all zero,
/// whose products are then zeros and NaNs, which the kernel keeps).
fn sided_ok(mode: Mode, f: SrFmt, a_hi: Option<i32>, b_max: f32) -> bool {
    // NaN compares false.
    matches!(mode, Mode::Up | Mode::Down) && a_hi.is_none_or(|h| pow2(h) * b_max as f64 <= above_max(f) / pow2(f.prec))
}

/// The power of two above `f`'s largest value ([`sided_ok`]'s `top`).
fn above_max(f: SrFmt) -> f64 {
    pow2(f.max.log2().floor() as i32 + 1)
}

/// The sums of a tile that ran a depth block allowed by [`sided_ok`] at or
/// past `top` (up; down: at or below -top), scaled as the tile is, set to the
/// infinity of their sign.
fn dir_sided(t: &mut [f32], up: bool, top: f32) {
    for x in t.iter_mut() {
        if up && *x >= top {
            *x = f32::INFINITY;
        } else if !up && *x <= -top {
            *x = f32::NEG_INFINITY;
        }
    }
}

/// Chunk totals of [`Kind16::Sr`]: `tot = SR(tot + row)` lane by lane, then
/// `row = 0`, as [`tile16_sr`] rounds (its `unit` and `rbits`): the add toward
/// zero (MXCSR) is the exact sum truncated to 24 bits, and lane i's random word
/// is `mix32(states[i])` (its Weyl state, [`Rng::weyl0`]). The caller keeps
/// every sum below the largest value and both operands on the format's grid.
///
/// With `ties` the caller's rounding draws more bits than `rbits` = `unit`
/// (wide bits, [`Kind16::Sr`]): the top `unit` decide as all of them do
/// except where they equal the remainder's top `unit` bits (the sum's bits
/// below the unit all ones after the add), where the bits below decide. Such
/// a lane keeps its total and its `row` (the others' rows are zeroed), and
/// bit l of `marks[i]` is set for lane 8i + l: the caller redoes them.
/// Returns whether any lane was kept.
///
/// # Safety
/// The CPU must support avx2; `tot`, `row` and `states` have the same length,
/// a multiple of 8; with `ties`, `marks` holds a byte for every 8 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn flush_sr(tot: &mut [f32], row: &mut [f32], states: &[u32], gamma: u32, rbits: u32, unit: u32, ties: bool, marks: &mut [u8]) -> bool {
    use std::arch::asm;
    assert!(tot.len() == row.len() && tot.len() == states.len() && tot.len().is_multiple_of(8));
    assert!((13..=21).contains(&unit) && (1..=unit).contains(&rbits) && (!ties || (rbits == unit && marks.len() >= tot.len() / 8)));
    if tot.is_empty() {
        return false;
    }
    let k = SrConsts::new(rbits, unit, gamma);
    // Toward zero.
    let rc = 3u32 << 13;
    let mut csr = [0u32; 2];
    // The kept lanes, or-ed.
    let mut kept = [0u32; 8];
    macro_rules! go {
        (plain, $m:ident, $sh:literal) => {
            go!($m, $sh, ["# no marks at {mk}", "vpand ymm0, ymm0, ymm5", "vxorps ymm1, ymm1, ymm1"])
        };
        // The bits below the unit (ymm2) all ones: the old total (ymm4) and row kept.
        (ties, $m:ident, $sh:literal) => {
            go!($m, $sh, [
                "vpandn ymm2, ymm5, ymm0",
                "vpcmpeqd ymm2, ymm2, ymm6",
                "vpand ymm0, ymm0, ymm5",
                "vblendvps ymm0, ymm0, ymm4, ymm2",
                "vpand ymm1, ymm2, ymmword ptr [{pb}]",
                "vpor ymm7, ymm7, ymm2",
                "vmovmskps {t:e}, ymm2",
                "mov byte ptr [{mk}], {t:l}",
                "inc {mk}",
            ])
        };
        ($m:ident, $sh:literal, [$($store:expr),* $(,)?]) => {
            asm!(
                mxcsr_enter!(),
                "vxorps ymm7, ymm7, ymm7",
                "vmovdqu ymm5, ymmword ptr [{k} + 96]",
                "vpcmpeqd ymm6, ymm6, ymm6",
                "vpxor ymm6, ymm6, ymm5",
                "2:",
                "vmovups ymm4, ymmword ptr [{c}]",
                "vaddps ymm0, ymm4, ymmword ptr [{pb}]",
                "vmovups ymm1, ymmword ptr [{v}]",
                sr_comp!($m, "ymm1", "ymm2"),
                "vpaddd ymm0, ymm0, ymm1",
                // The rounded total in ymm0, the row left in ymm1.
                $($store,)*
                "vmovups ymmword ptr [{c}], ymm0",
                "vmovups ymmword ptr [{pb}], ymm1",
                "add {c}, 32",
                "add {pb}, 32",
                "add {v}, 32",
                "dec {kn}",
                "jnz 2b",
                "vmovdqu ymmword ptr [{kept}], ymm7",
                "vldmxcsr dword ptr [{csr}]",
                c = inout(reg) tot.as_mut_ptr() => _,
                pb = inout(reg) row.as_mut_ptr() => _,
                v = inout(reg) states.as_ptr() => _,
                kn = inout(reg) tot.len() / 8 => _,
                csr = in(reg) csr.as_mut_ptr(),
                rc = in(reg) rc,
                k = in(reg) k.0.as_ptr(),
                kept = in(reg) kept.as_mut_ptr(),
                mk = inout(reg) marks.as_mut_ptr() => _,
                t = out(reg) _,
                sh = const $sh,
                out("ymm0") _, out("ymm1") _, out("ymm2") _,
                out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
                options(nostack),
            )
        };
    }
    // SAFETY: the loads and stores stay inside tot, row and states (equal
    // lengths, a multiple of 8, asserted above), the constants and `kept`; MXCSR
    // is restored before the block ends; the clobbered vector registers are declared.
    unsafe {
        match (ties, rbits > 16) {
            (false, true) => by_sr_shift!(unit, go, plain, srf),
            (false, false) => by_sr_shift!(unit, go, plain, sr),
            (true, true) => by_sr_shift!(unit, go, ties, srf),
            (true, false) => by_sr_shift!(unit, go, ties, sr),
        }
    }
    kept.iter().any(|&x| x != 0)
}

/// `tot = round(tot + row)` lane-wise (chunk totals into the accumulator's
/// format, rounded as [`add16`] with `BF`), then `row = 0`. Both hold
/// values of that format, so the sum is exact in f64 and the TwoSum /
/// round-to-odd kernel rounds it exactly.
///
/// # Safety
/// The CPU must support avx2, fma and f16c; both slices have a multiple of 8 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn flush16<const BF: bool>(tot: &mut [f32], row: &mut [f32]) {
    use std::arch::x86_64::*;
    assert!(tot.len() == row.len() && tot.len().is_multiple_of(8));
    // SAFETY: j + 8 <= len for every access; CPU features per the contract.
    unsafe {
        let one = _mm256_set1_ps(1.0);
        for j in (0..tot.len()).step_by(8) {
            let t = _mm256_loadu_ps(tot.as_ptr().add(j));
            let r = _mm256_loadu_ps(row.as_ptr().add(j));
            _mm256_storeu_ps(tot.as_mut_ptr().add(j), add16::<K_ODD, BF>(t, r, one, one));
            _mm256_storeu_ps(row.as_mut_ptr().add(j), _mm256_setzero_ps());
        }
    }
}

/// Chunk totals of [`Kind16::Split`] into its [`split_fmt`] format: `tot =
/// round(tot + row)` lane by lane to nearest-even, the f32 add then Veltkamp's
/// split with multiplier `spl` ([`split_mult`]), then `row = 0`. Both operands
/// are values of the format (at most 11 bits), so the double rounding is
/// innocuous. A vector with a lane whose f32 sum is not at most `max` (the
/// format's largest value) in magnitude, where the rounded sum could pass it
/// (or an inf or NaN), takes `slow(tot, row)` (the exact rounding) lane by lane.
///
/// # Safety
/// The CPU must support avx2 and fma; both slices have the same length, a multiple of 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn flush_split(tot: &mut [f32], row: &mut [f32], spl: f32, max: f32, slow: impl Fn(f32, f32) -> f32) {
    use std::arch::x86_64::*;
    assert!(tot.len() == row.len() && tot.len().is_multiple_of(8));
    // SAFETY: j + 8 <= len for every access; CPU features per the contract.
    unsafe {
        let (spl, max) = (_mm256_set1_ps(spl), _mm256_set1_ps(max));
        let absm = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
        for j in (0..tot.len()).step_by(8) {
            let s = _mm256_add_ps(_mm256_loadu_ps(tot.as_ptr().add(j)), _mm256_loadu_ps(row.as_ptr().add(j)));
            // |s| > max, or NaN (unordered).
            let out = _mm256_cmp_ps::<_CMP_NLE_UQ>(_mm256_and_ps(s, absm), max);
            if _mm256_movemask_ps(out) != 0 {
                for l in j..j + 8 {
                    tot[l] = slow(tot[l], row[l]);
                }
            } else {
                let t = _mm256_mul_ps(s, spl);
                _mm256_storeu_ps(tot.as_mut_ptr().add(j), _mm256_sub_ps(t, _mm256_sub_ps(t, s)));
            }
            _mm256_storeu_ps(row.as_mut_ptr().add(j), _mm256_setzero_ps());
        }
    }
}

/// Row-group height of the tile kernels (registers: 2*MR accumulators): six
/// rows for the kernels with few live values besides (and float16's `Odd`,
/// whose long chain between steps wants twelve accumulators in flight), four
/// for the others.
const MR_FMA: usize = 6;
const MR_ODD: usize = 4;
/// Rows a task covers (a multiple of both MRs; small, so that the pool's
/// threads get near-equal shares of the tasks).
const RB16: usize = 24;
/// Columns of a B panel: B is packed (decoded to f32) once per panel and shared
/// by every row task; a task keeps `RB16 x` panel-width accumulators. The
/// panel is all of B when its f32 copy takes at most `NP16_BYTES` (one
/// parallel packing and one parallel loop for the whole product), else
/// `NP16` columns.
const NP16: usize = 256;
/// Strips of a B panel whose columns' random words one piece draws.
const WORDS16: usize = 16;
const NP16_BYTES: usize = 16 << 20;
/// The most rows of a [`drive16`] product that reads a bfloat16 or float16 B in
/// place ([`BSrc::Codes`]).
const IN_PLACE_M: usize = 12;

/// A word of the f32 stochastic tiles placed: its top bits (`w >> wsh`), xor
/// `flip`, moved to just below the unit (`<< psh`).
#[inline(always)]
fn place_word(w: u64, flip: u32, wsh: u32, psh: u32) -> u32 {
    (((w >> wsh) as u32) ^ flip) << psh
}

/// A step's column words `run` (of up to WORDS16 strips' columns) placed
/// ([`place_word`]) into the strips of `d` (`sl` values apart) at step `kk`,
/// with AVX2 where the CPU has it.
#[cfg(target_arch = "x86_64")]
fn place_strips(run: &[u64], wsh: u32, psh: u32, kk: usize, sl: usize, d: &mut [u32]) {
    #[inline(always)]
    fn body(run: &[u64], wsh: u32, psh: u32, kk: usize, sl: usize, d: &mut [u32]) {
        for (ws, ds) in run.chunks(16).zip(d.chunks_exact_mut(sl)) {
            for (x, &w) in ds[kk * 16..kk * 16 + ws.len()].iter_mut().zip(ws) {
                *x = place_word(w, 0, wsh, psh);
            }
        }
    }
    /// # Safety
    /// The CPU must support avx2.
    #[target_feature(enable = "avx2")]
    unsafe fn body_avx2(run: &[u64], wsh: u32, psh: u32, kk: usize, sl: usize, d: &mut [u32]) {
        body(run, wsh, psh, kk, sl, d)
    }
    if super::simd() {
        // SAFETY: simd() holds only where avx2 was detected.
        return unsafe { body_avx2(run, wsh, psh, kk, sl, d) };
    }
    body(run, wsh, psh, kk, sl, d)
}

/// The Weyl states ([`Rng::weyl0`]) of a [`flush_sr`] row of 16 lanes at its
/// first step, lane l of index `idx0 + l * stride` (wrapping); `None` when
/// some lane's index changes its upper 32 bits over `len` steps (the kernel
/// advances the lower word only). Where the 16 indices and their steps share
/// one upper word, the states are `x0 + l * stride * gamma`.
fn sr_states(rng: &Rng, idx0: u64, stride: u64, len: usize) -> Option<[u32; 16]> {
    let last = len.max(1) as u64 - 1;
    let span = 15u64.checked_mul(stride).and_then(|x| x.checked_add(last));
    if let Some(end) = span.and_then(|x| idx0.checked_add(x)) {
        if idx0 >> 32 == end >> 32 {
            let x0 = rng.weyl0(idx0 as u32, rng.hi_word(idx0));
            let g = (stride as u32).wrapping_mul(rng.gamma());
            return Some(std::array::from_fn(|l| x0.wrapping_add(g.wrapping_mul(l as u32))));
        }
    }
    let mut v = [0u32; 16];
    for (l, x) in v.iter_mut().enumerate() {
        let idx = idx0.wrapping_add((l as u64).wrapping_mul(stride));
        if idx >> 32 != idx.wrapping_add(last) >> 32 {
            return None;
        }
        *x = rng.weyl0(idx as u32, rng.hi_word(idx));
    }
    Some(v)
}

/// [`drive`] for the float16 and bfloat16 accumulation [`kind16`] picks, on the
/// tile kernels; the results are exactly those of the f64 path. Depth blocks
/// whose values could make an f32 product inexact (kinds `Odd` and `Mid`) run
/// through the f64 rounding. `false` where kind `Sr` with wide bits gave the
/// product up (its tiles' sums too often inexact in f32): `c` is then to be
/// computed by the f64 path. `tr` as [`drive`]'s.
#[cfg(target_arch = "x86_64")]
fn drive16(kind: Kind16, bf: bool, a: &Operand, b: &Operand, c: EmuOut, spec: &AccumSpec, outer: Option<&Dyn>, tr: bool) -> Result<bool> {
    use std::arch::x86_64::_MM_FROUND_TO_NEAREST_INT;
    use std::sync::atomic::Ordering::Relaxed;
    let (m, n, k) = (a.rows, b.cols, a.cols);
    if m == 0 || n == 0 {
        return Ok(true);
    }
    let exact = Dyn::new(spec.fmt, spec.opts)?;
    let rm = f16_rounding(spec.opts.mode);
    // Kinds Odd and Mid need every product of a depth block exact in f32.
    let scan = matches!(kind, Kind16::Odd | Kind16::Mid | Kind16::OddE5m2);
    // Kind Split checks each depth block's values ([`split_ok`]).
    let split = matches!(kind, Kind16::Split | Kind16::UnitNe | Kind16::OddUnit);
    // Kind Sr checks each depth block's values too (the bound of `split_ok`),
    // and draws the products' random bits as `drive` does ([`StepRand`]), the
    // chunk totals' keyed by (element, step).
    let sr = kind == Kind16::Sr;
    let sf = if sr { sr_fmt(&spec.fmt) } else { None };
    // Kind Split into a format other than float16 and bfloat16 ([`split_fmt`]):
    // its blocks outside the bound run the f64 rounding, as kind Sr's.
    let gs = if split { split_fmt(&spec.fmt, &spec.opts) } else { None };
    let unit_ne = kind == Kind16::UnitNe;
    let odd_unit = kind == Kind16::OddUnit;
    let spl = split_mult(gs.map_or(if bf { 8 } else { 11 }, |f| f.prec));
    // Kind Dir into a `Unit` format: its blocks outside the bound run the f64
    // rounding too, or for float16 and float8_e5m2 their conversions (`dalt`).
    let du = if let Kind16::Dir(to @ DirTo::Unit(_)) = kind { sr_fmt(&spec.fmt).map(|f| (f, to)) } else { None };
    let dalt = du.and_then(|_| match spec.fmt {
        Format::Float(f) if f == named::FLOAT16 => Some(DirTo::F16),
        Format::Float(f) if f == named::FLOAT8_E5M2 => Some(DirTo::E5m2),
        _ => None,
    });
    // Kinds Sr and Dir into a `Unit` format run on values scaled by 2^usc ([`unit_scale`]):
    // A's block where it runs them, and each tile around the kernel's call.
    let usc = sf.or(du.map(|d| d.0)).or(gs.filter(|_| unit_ne || odd_unit)).map_or(0, |f| unit_scale(&f));
    // The scale is split between B's panel (per depth block, as much of it as B's
    // values take exactly: `bsc` below) and A's block (the rest), so that tiny values
    // in one operand do not stop the block.
    let scaled_kind = usc != 0 && (sr || du.is_some() || unit_ne || odd_unit);
    // The power of two above a `Unit` format's largest value, scaled ([`dir_sided`]).
    let sided_top = du.map_or(f32::INFINITY, |(f, _)| (above_max(f) * pow2(usc)) as f32);
    // How much an add can grow a magnitude ([`block_ok`]): toward zero, not at all.
    let growth = |prec: i32| if spec.opts.mode == Mode::TowardZero { 1.0 } else { 1.0 + 2f64.powi(1 - prec) };
    // And in the subnormal range, by a unit (toward zero: nothing).
    let sub_unit = |f: SrFmt| if spec.opts.mode == Mode::TowardZero { 0.0 } else { pow2(f.sub) };
    // Kind Odd into float16: blocks whose sums stay finite run kind OddFin (in
    // products of 2^15 multiply-adds and more: below, the scans for its bound
    // cost more than it saves).
    let odd16 = kind == Kind16::Odd && !bf && m * n * k >= 1 << 15;
    let bounds_used = split || sr || du.is_some() || odd16;
    let chunk = spec.chunk.map(|(cs, _)| cs).unwrap_or(usize::MAX);
    let steps = (k + if outer.is_some() { k.div_ceil(chunk) } else { 0 }) as u64;
    let (rng2, rbits) = (Rng::new(chunk_opts(spec.opts).key), spec.opts.rbits);
    // The products' random bits: words of rows and columns ([`StepRand`], as `drive`'s).
    let words = StepRand::new(spec.opts.key, steps);
    let words = if tr { words.transposed() } else { words };
    // Kind Sr's kernel adds `2^R - 1 - rand` below the unit: the xor of a row's
    // complemented bits and a column's bits, each placed there.
    let sr_unit = sf.map_or(0, |f| f.unit);
    // More random bits than the f32 remainder below the unit holds (`wide`,
    // [`sr_kind`]): the kernels take their top `unit` bits, which decide as all
    // of them do wherever the f32 sums are the exact ones (the top R bits of a
    // remainder of at most `unit` bits, then zeros, against the top R of the
    // word: only equal top `unit` bits on both sides leave the rest to decide,
    // and a remainder of zeros there rounds down either way). A tile whose FMAs
    // were not all exact (MXCSR's precision flag) and where some add met such a
    // tie (a second pass, `tile16_sr` with [`SR_TIES`]) is redone on f64 lanes
    // from its saved accumulators ([`Dyn::sr_tile64`]).
    let wide = sr && rbits > sr_unit;
    let kbits = if wide { sr_unit } else { rbits };
    // The placed words ([`place_word`]): a word's top `kbits` bits (xor `flip`)
    // moved to just below the unit, `dst[q * stride]` from `src[q]` (shift counts
    // in locals: one loop the compiler vectorizes where the stride is 1).
    let (wsh, psh) = (64 - kbits.clamp(1, 64), sr_unit.saturating_sub(kbits));
    let place_run = move |src: &[u64], flip: u32, dst: &mut [u32], stride: usize| {
        for (q, &w) in src.iter().enumerate() {
            dst[q * stride] = place_word(w, flip, wsh, psh);
        }
    };
    // The largest value's pattern, scaled: a watched sum past it voids the tile.
    let sr_top = sf.map_or(0, |f| ((f.max * 2f64.powi(unit_scale(&f))) as f32).to_bits());
    let rbits_mask = if sr { (1u64 << kbits) - 1 } else { 0 };
    // The chunk totals' bits: keyed by element e = row * n + column, step k + r.
    let index = |row: usize, col: usize, t: usize| ((row * n + col) as u64).wrapping_mul(steps).wrapping_add(t as u64);
    // Chunk totals into the same format, nearest-even, run vectorized too.
    // (flush16 rounds into float16 and bfloat16 only.)
    let same = spec.chunk.is_some_and(|(_, f2)| f2 == spec.fmt) && !matches!(kind, Kind16::Dir(_) | Kind16::OddE5m2 | Kind16::Sr) && gs.is_none();
    // Or, with kind Split into another format ([`split_fmt`]), into that format:
    // the f32 add and the split, as the tiles round (two values of the format).
    let gs2 = gs.filter(|_| spec.chunk.is_some_and(|(_, f2)| f2 == spec.fmt));
    // Or into a target of the directed kernels, or float32 to nearest-even:
    // `flush_dir` (MXCSR rounding).
    let outer_dir = spec.chunk.and_then(|(_, f2)| {
        let o2 = chunk_opts(spec.opts);
        let f32_ne = f2 == Format::Float(named::FLOAT32) && o2.mode == Mode::NearestEven && !o2.saturate;
        if f32_ne {
            Some((DirTo::F32, _MM_FROUND_TO_NEAREST_INT))
        } else {
            // (A `Unit` target needs its sums checked: `du2` below.)
            dir_to(&f2, &o2).filter(|to| !matches!(to, DirTo::Unit(_))).map(|to| (to, f16_rounding(o2.mode)))
        }
    });
    let flush_vec = same || outer_dir.is_some();
    // Or, with kind Dir into a `Unit` format, into that format: the same
    // rounding of an f32 add when no total can pass the largest value.
    let du2 = du.filter(|_| spec.chunk.is_some_and(|(_, f2)| f2 == spec.fmt));
    // Or, with kind Sr, stochastic chunk totals into a format of the same kind
    // whose grid holds the accumulator's values (the sum of two values on it,
    // truncated by the add, decides as for the products): `flush_sr`.
    let fine = totals_fine(spec);
    // With more bits than its unit (up to 32), the lanes whose top bits tie
    // redone ([`flush_sr`] with `ties`).
    let sr2 = spec.chunk.and_then(|(_, f2)| {
        let (f1, f2) = (sf?, sr_fmt(&f2)?);
        (f1.sub >= f2.sub && rbits <= 32).then_some(f2)
    });
    let ((pa, ga, _), (pb, gb, _)) = (profile(&a.format().expect("kind16 checked")), profile(&b.format().expect("kind16 checked")));
    // Bounds of an operand's values ([`exp_bounds`]), their last bits at or above its
    // format's smallest unit (2^-24 for float16), which the bounds from each value's
    // exponent and the format's precision miss for its subnormals.
    let on_grid = |x: Option<(i32, i32)>, g: i32| x.map(|(l, h)| (l.max(g), h));
    // Kind OddUnit: may its products have bits below 2^-149 once scaled ([`tails_harmless`])?
    let tails_ok = odd_unit && gs.is_some_and(|f| tails_harmless(pa, pb, f.sub + usc));
    let kbs = KB.min(k.max(1));
    let kblocks = k.div_ceil(KB);
    let rblocks = m.div_ceil(RB16);
    let threads = parallel::num_threads();
    // Kind Odd: every product of a depth block must be exact in f32 (no underflow
    // below 2^-149, none reaching 2^127, so no sum overflows f32 either).
    let fits = |x: Option<(i32, i32)>, y: Option<(i32, i32)>| match (x, y) {
        (Some((la, ha)), Some((lb, hb))) => la + lb >= -149 && ha + hb <= 126,
        _ => true,
    };
    let np = if k.max(1) * n.div_ceil(16) * 16 * 4 <= NP16_BYTES { n } else { NP16 };
    // Few rows against a row-major bfloat16 or float16 B (a vector-matrix product, a
    // small batch), to nearest (kinds Odd and Mid, into float16 or bfloat16) or in a
    // directed mode (kind Dir): the kernels read B's codes in place, decoded in
    // registers ([`BSrc::Codes`]), where a packed panel would write each value and
    // read it back for the few rows' products. The tasks scan their columns of each depth
    // block for its bounds; a block holding a NaN (whose payload the decode keeps),
    // or whose products the kernels cannot take, and a last strip of fewer than 16
    // columns, are packed into the task's own buffer (`bloc`) as the panel would hold
    // them, unscaled: A's block takes the whole of a scaled kind's scale.
    let b_f16 = matches!(b.dec, super::Dec::F16);
    // Products of up to IN_PLACE_M rows: every row group decodes the codes again
    // (cheaper than packing while the groups are few). Kind Odd into float16 then
    // takes tiles of 4 rows (`four_in_place`), not its 6.
    // float8_e5m2 and float8_e4m3fn codes (`b8`: their table), to nearest (kinds
    // Split and UnitNe; blocks past the bound Fma into float16 or bfloat16, into
    // other formats packed for the f64 rounding) and in the directed modes (kind
    // Dir), likewise.
    let b8 = match (&b.dec, super::kernels::fp8_kind(b.format())) {
        (super::Dec::Lut8(t), Some(f)) if matches!(kind, Kind16::Split | Kind16::UnitNe | Kind16::Dir(_)) => {
            Some((f == super::kernels::FP8_E4M3FN, &t[..]))
        }
        _ => None,
    };
    let b_codes = (matches!(b.dec, super::Dec::Bf16) || b_f16 || b8.is_some())
        && b.cs == 1
        && m <= IN_PLACE_M
        && (matches!(kind, Kind16::Odd | Kind16::Mid | Kind16::Split) && !scaled_kind || matches!(kind, Kind16::Dir(_) | Kind16::UnitNe));
    // One row (sums, vector-matrix products): tiles of one row, no padding rows.
    // Kind Odd into float16 on a B read in place: tiles of four rows, whose B is
    // decoded into registers (its six-row tiles read it from memory); and kind
    // Split on float8 codes in place, up to 8 rows (4 + 4, not 6 + 2; 9 to 12 take
    // two groups of 6).
    let four_in_place = b_codes && (kind == Kind16::Odd && !bf || kind == Kind16::Split && b8.is_some() && m <= 8);
    let mr = if m == 1 {
        1
    } else if four_in_place {
        MR_ODD
    } else if matches!(kind, Kind16::Fma | Kind16::Split | Kind16::Dir(_)) || kind == Kind16::Odd && !bf {
        MR_FMA
    } else {
        MR_ODD
    };
    // The kind of the codes in place and their bytes.
    let b_code = match b8 {
        Some((true, _)) => CODE_E4M3FN,
        Some((false, _)) => CODE_E5M2,
        None if b_f16 => CODE_F16,
        None => CODE_BF16,
    };
    let cb = code_bytes(b_code);
    // (No panel in place: one column block, each task's codes of a row contiguous.)
    let np = if b_codes { n } else { np };
    let pstrips = np.min(n).div_ceil(16);
    // B panel: block kbi, strip s at (kbi * strips + s) * kbs * 16, [kk*16 + j].
    // (Starting on a cache line: a strip's rows of 16 values are lines.)
    let plen = if b_codes { 0 } else { kblocks * pstrips * kbs * 16 };
    let mut bpanel_buf = crate::try_filled(0f32, plen + 16)?;
    let boff = bpanel_buf.as_ptr().align_offset(64).min(16);
    let bpanel = &mut bpanel_buf[boff..boff + plen];
    // Kind Sr: the columns' placed random bits, as the B panel ([kk*16 + j]).
    let mut vpanel = crate::try_filled(0u32, if sr { bpanel.len() } else { 0 })?;
    let mut bbounds: Vec<Option<(i32, i32)>> = crate::try_filled(None, kblocks)?;
    // Kind Split: the largest |b| of each depth block (inf included).
    let mut bmaxes = crate::try_filled(0f32, kblocks)?;
    // The panels' parallel loops take a worker still spinning after the previous
    // loop, if one is (no wake-up; see `parallel::hot`).
    // Kind Sr's wide bits: a task that redid too many tiles stops the product
    // (the f64 tiles then run it whole).
    let gave_up = std::sync::atomic::AtomicBool::new(false);
    let mut all = || for j0 in (0..n).step_by(np) {
        if gave_up.load(Relaxed) {
            return;
        }
        let jb = np.min(n - j0);
        let strips = jb.div_ceil(16);
        let pack_b = |q: usize, dst: &mut [f32]| {
            let (kbi, s) = (q / strips, q % strips);
            let (kb, kn) = (kbi * KB, KB.min(k - kbi * KB));
            let base = kb as isize * b.rs + (j0 + 16 * s) as isize * b.cs;
            // SAFETY: rows kb..kb+kn, columns j0+16s.. (at most 16, inside b);
            // dst[kk*16 + j] = b[kb+kk, j0+16s+j], zeros past the last column.
            unsafe { super::kernels::pack_real_any::<f32>(b, base, b.cs, b.rs, 16.min(jb - 16 * s), 16, kn, dst) };
            let v = &dst[..kn * 16];
            if !(scan || bounds_used) {
                return (None, 0.0);
            }
            let (bounds, top) = exp_bounds_max(v, pb);
            let bounds = on_grid(bounds, gb);
            (bounds, if bounds_used { top } else { 0.0 })
        };
        let used = &mut bpanel[..if b_codes { 0 } else { kblocks * strips * kbs * 16 }];
        let mut sb: Vec<(Option<(i32, i32)>, f32)> = vec![(None, 0.0); if b_codes { 0 } else { kblocks * strips }];
        let mut pieces: Vec<_> = used.chunks_mut(kbs * 16).zip(sb.iter_mut()).enumerate().collect();
        if b.rs == 1 && b.cs != 1 {
            // Columns contiguous: a strip's depth blocks in turn, so that its 16
            // columns are read from end to end.
            pieces.sort_by_key(|p| (p.0 % strips, p.0 / strips));
        }
        parallel::for_each_piece(pieces, &|(q, (d, bound))| *bound = pack_b(q, d));
        if sr {
            // The columns' words of a depth block, up to WORDS16 strips a piece: each
            // step's words drawn across the piece's columns at once, then placed
            // into the strips.
            let vused = &mut vpanel[..kblocks * strips * kbs * 16];
            let vpieces: Vec<(usize, usize, &mut [u32])> = vused
                .chunks_mut(strips * kbs * 16)
                .enumerate()
                .flat_map(|(kbi, blk)| blk.chunks_mut(WORDS16 * kbs * 16).enumerate().map(move |(g, d)| (kbi, g * WORDS16, d)))
                .collect();
            parallel::for_each_piece(vpieces, &|(kbi, s, d): (usize, usize, &mut [u32])| {
                let (kb, kn) = (kbi * KB, KB.min(k - kbi * KB));
                let cols = jb.min(16 * (s + d.len() / (kbs * 16))) - 16 * s;
                let mut run = [0u64; 16 * WORDS16];
                for kk in 0..kn {
                    words.col_run(j0 + 16 * s, kb + kk, kbits, &mut run[..cols]);
                    place_strips(&run[..cols], wsh, psh, kk, kbs * 16, d);
                }
            });
        }
        // (In place, each task scans its own columns.)
        for (kbi, (bb, bm)) in bbounds.iter_mut().zip(bmaxes.iter_mut()).enumerate().filter(|_| !b_codes) {
            let blk = &sb[kbi * strips..(kbi + 1) * strips];
            *bb = blk.iter().filter_map(|x| x.0).reduce(merge_bounds);
            // The largest pattern: a strip's NaN ([`abs_max32`]) stays NaN.
            *bm = f32::from_bits(blk.iter().map(|x| x.1.to_bits()).max().unwrap_or(0));
        }
        // Kinds on scaled values: each depth block of the panel scaled by 2^bsc, the
        // part of the scale its values take exactly (their last bits at or above
        // 2^-149; bounds and largest values above stay those of the values). In
        // place, none.
        // (Smaller than bbounds, allocated above.)
        let mut bsc: Vec<i32> = vec![0; kblocks];
        if scaled_kind && !b_codes {
            for (e, bb) in bsc.iter_mut().zip(&bbounds) {
                *e = bb.map_or(usc, |(lo, _)| usc.max(-149 - lo));
            }
        }
        for (kbi, &e) in bsc.iter().enumerate() {
            if e != 0 {
                let f = 2f32.powi(e);
                used[kbi * strips * kbs * 16..(kbi + 1) * strips * kbs * 16].iter_mut().for_each(|x| *x *= f);
            }
        }
        let (bpanel, vpanel, bbounds, bmaxes, bsc) = (&*bpanel, &vpanel, &bbounds, &bmaxes, &bsc);
        // Few row blocks (a short A): the strips of the panel are split too.
        let csplit = if rblocks >= 2 * threads { 1 } else { (2 * threads).div_ceil(rblocks).min(strips) };
        let task = |t: usize| {
            let (ib, cs) = (t / csplit, t % csplit);
            let (s0, s1) = (cs * strips / csplit, (cs + 1) * strips / csplit);
            let ns = s1 - s0;
            let i0 = ib * RB16;
            let rb = RB16.min(m - i0);
            let groups = rb.div_ceil(mr);
            let tile = mr * 16;
            // Tile (g, s) holds rows i0+g*mr.., columns j0+16(s0+s).., row-major mr x 16.
            let mut acc = vec![0f32; groups * ns * tile];
            let tot32_used = flush_vec || sr2.is_some() || gs2.is_some() || du2.is_some();
            let mut tot32 = vec![0f32; if outer.is_some() && tot32_used { acc.len() } else { 0 }];
            let mut tot64 = vec![0f64; if outer.is_some() && !tot32_used { acc.len() } else { 0 }];
            // The Weyl states of the chunk totals' random words (`sr2`).
            let mut sr_st = vec![0u32; if outer.is_some() && sr2.is_some() { acc.len() } else { 0 }];
            // Their states at the first total's step (k), computed at the first
            // flush; `Some(false)` when some index changes its upper word over the
            // totals' steps (then each flush computes its own).
            let mut sr_st0 = vec![0u32; sr_st.len()];
            let mut sr_st0_ok: Option<bool> = None;
            // Their lanes kept by [`flush_sr`] with `ties`, a byte for 8.
            let mut marks = vec![0u8; sr_st.len() / 8];
            let mut apack = vec![0f32; groups * kbs * mr];
            // One row's A block, each value four times (four strips at a time).
            let mut a4 = vec![0f32; if mr == 1 { kbs * 4 } else { 0 }];
            // A's block for the conversions' kernel where kind Dir's checked runs hand over to it.
            let mut apalt = vec![0f32; if du.is_some() && dalt.is_some() { groups * kbs * mr } else { 0 }];
            // Kind Sr: the rows' placed complemented random bits, as apack.
            let mut upack = vec![0u32; if sr { apack.len() } else { 0 }];
            let mut urun = vec![0u64; if sr { kbs } else { 0 }];
            let mut tsave = vec![0f32; if sr || du.is_some() { mr * 16 } else { 0 }];
            // Kind Sr's wide bits: the tile of the pass that finds ties.
            let mut tver = vec![0f32; if wide { mr * 16 } else { 0 }];
            // Kind Sr's wide bits: the f64 tiles' buffers (at the first redo), and
            // the tiles tried on f32 lanes and redone.
            let mut buf64: Option<Sr64Buf> = None;
            let (mut tried, mut redone) = (0usize, 0usize);
            // In place: the task's strips of a depth block packed where they cannot be
            // read in place, strip s at (s - pk0) * kbs * 16 (pk0 below: the first
            // one packed), as in the panel.
            let mut bloc: Vec<f32> = Vec::new();
            // The task's columns and their full strips (in place: the rest packed).
            let (ja, jz) = (16 * s0, jb.min(16 * s1));
            let full = s0.max(jz / 16);
            for (kbi, &bbk) in bbounds.iter().enumerate() {
                let (kb, kn) = (kbi * KB, KB.min(k - kbi * KB));
                // In place: this block's bounds and largest magnitude from the task's
                // codes; none of them a NaN?
                let (bbk, b_max, nan_free) = if b_codes {
                    // SAFETY: rows kb..kb+kn, columns j0+ja..j0+jz are inside b.
                    let scan = unsafe { operand_code_scan(b, kb as isize * b.rs + (j0 + ja) as isize, b.rs, kn, jz - ja) };
                    let (lo, hi, top) = scan.expect("codes in place are of a decoding the scan reads");
                    (on_grid(exp_bounds_of(lo, hi, pb), gb), f32::from_bits(top), top <= 0x7f80_0000)
                } else {
                    (bbk, bmaxes[kbi], false)
                };
                for g in 0..groups {
                    let base = (i0 + g * mr) as isize * a.rs + kb as isize * a.cs;
                    // SAFETY: rows i0+g*mr.. (at most mr, inside a), columns kb..kb+kn;
                    // apack[g][kk*mr + r] = a[i0+g*mr+r, kb+kk], zeros past the last row.
                    unsafe { super::kernels::pack_real_any::<f32>(a, base, a.rs, a.cs, mr.min(rb - g * mr), mr, kn, &mut apack[g * kbs * mr..]) };
                }
                let ablock = |g: usize| &apack[g * kbs * mr..g * kbs * mr + kn * mr];
                // A's bounds, scanned once for the block's checks (before any scaling).
                let ab = if scan || bounds_used { on_grid((0..groups).filter_map(|g| exp_bounds(ablock(g), pa)).reduce(merge_bounds), ga) } else { None };
                // B's scale in this block and the rest of the scale, A's.
                let sbk = bsc[kbi];
                let sa = usc - sbk;
                // Kinds Split and Sr: may this block run them (`split_ok`)?
                let row_max = if bounds_used {
                    (0..groups).flat_map(|g| (0..mr).map(move |r| ablock(g).iter().skip(r).step_by(mr).map(|x| x.abs() as f64).sum::<f64>())).fold(0.0, f64::max)
                } else {
                    0.0
                };
                // The largest accumulator of the task's tiles (NaN if one is: every bound refuses).
                let acc_max = if bounds_used { abs_max32(&acc) } else { f32::NAN };
                // Kind Dir up or down into a `Unit` format: past the largest value on one
                // side only, where its sums stay ([`sided_ok`]).
                // (A's infinities and NaNs, which the bounds of its values leave out, make `row_max` so.)
                let sided = row_max.is_finite() && du.is_some_and(|(f, _)| sided_ok(spec.opts.mode, f, ab.map(|x| x.1), b_max));
                let bounded = bounds_used && {
                    let lo = ab.zip(bbk).map(|(x, y)| x.0 + y.0);
                    match (sf.or(du.map(|d| d.0)), gs) {
                        // Stochastic or directed: every sum below the largest value, which no
                        // rounding then passes, and A's values scaled exactly.
                        (Some(f), _) => {
                            (block_ok(growth(f.prec), sub_unit(f), f.max, acc_max, row_max, b_max, kn) || sided) && scale_ok(sa, ab.map(|x| x.0))
                        }
                        // To nearest: likewise (a sum below it rounds to at most it); kind
                        // UnitNe needs no grid but every product below 2^(sub + 23).
                        (_, Some(f)) => {
                            if unit_ne {
                                // The largest pattern: a NaN stays NaN ([`abs_max32`]).
                                let a_max = f32::from_bits((0..groups).map(|g| abs_max32(ablock(g)).to_bits()).max().unwrap_or(0));
                                // Scaled, the FMA rounds at 2^-149 below the smallest normal: exact
                                // there while the products' last bits stay at or above it.
                                (a_max as f64 * b_max as f64) < 2f64.powi(f.sub + 23)
                                    && near_ok(f.prec, f.max, f.sub, acc_max, row_max, b_max, kn)
                                    && scale_ok(sa, ab.map(|x| x.0))
                                    && lo.is_none_or(|l| l + usc >= -149)
                            } else if odd_unit {
                                // Every scaled product an f32 (its last bit at or above
                                // 2^-149, none reaching 2^127), as kind Odd needs; or
                                // products of such bits that none of them with a bit
                                // below 2^-149 can make the residual FMA's underflow lose
                                // a sticky bit that decides ([`tails_harmless`]: float8_e5m2
                                // from bfloat16 or float16).
                                let hi = ab.zip(bbk).map(|(x, y)| x.1 + y.1);
                                near_ok(f.prec, f.max, f.sub, acc_max, row_max, b_max, kn)
                                    && scale_ok(sa, ab.map(|x| x.0))
                                    && (lo.is_none_or(|l| l + usc >= -149) || tails_ok)
                                    && hi.is_none_or(|h| h <= 126)
                            } else {
                                split_ok(f.prec, f.max, f.sub, acc_max, row_max, b_max, lo, kn)
                            }
                        }
                        _ => {
                            let (p, limit, sub) = if bf { (8, 2f64.powi(100), -133) } else { (11, 65520.0, -24) };
                            split_ok(p, limit, sub, acc_max, row_max, b_max, lo, kn)
                        }
                    }
                };
                // Kind Odd into float16 from finite accumulators whose sums stay below
                // its overflow threshold: kind OddFin.
                let odd_fin = odd16 && near_ok(11, 65520.0, -24, acc_max, row_max, b_max, kn);
                // Kind Sr's blocks outside the bound run the f64 rounding, and so do kind Split's into a `gs` format
                // and kind Dir's into a `Unit` format other than float16 and float8_e5m2.
                // Kind OddUnit into float8_e5m2 outside its bound: kind OddE5m2 where that holds.
                let odd_alt = odd_unit && !bounded && spec.fmt == Format::Float(named::FLOAT8_E5M2) && fits(ab, bbk);
                // Kind Sr past the bound: the kernel that watches its sums
                // ([`tile16_sr`] with `TRACK`), where A's values scale exactly and no sum,
                // however each add grows it, comes near f32's overflow.
                let track = sr && !bounded && {
                    let f = sf.expect("kind Sr");
                    let loose = (acc_max as f64 + row_max * b_max as f64 + kn as f64 * sub_unit(f)) * growth(f.prec).powi(kn as i32);
                    scale_ok(sa, ab.map(|x| x.0)) && loose * 2f64.powi(usc) < 2f64.powi(100)
                };
                // ... in runs checked at their starts ([`tile16_sr_runs`]), where a bound
                // on a run leaves room: the longest run of 16, 8 or 4 steps whose sums stay
                // below the largest value from any accumulator of at most `top` (with
                // twice the block's largest accumulator below it), and that `top`, scaled,
                // as an f32 pattern rounded down.
                let run_top = |f: SrFmt, run: usize| {
                    let top = f.max / growth(f.prec).powi(run as i32) - row_max * b_max as f64 - run as f64 * 2f64.powi(f.sub);
                    let ts = top * 2f64.powi(usc);
                    let tp = ts as f32;
                    let tp = if tp as f64 > ts { f32::from_bits(tp.to_bits() - 1) } else { tp };
                    (tp > 0.0).then_some(tp.to_bits())
                };
                let runs_plan = |f: SrFmt| {
                    let amax = acc_max as f64 * 2f64.powi(usc);
                    [16usize, 8, 4].into_iter().find_map(|run| run_top(f, run).filter(|&tp| f32::from_bits(tp) as f64 > 2.0 * amax).map(|tp| (run, tp)))
                };
                let sr_runs = if track { runs_plan(sf.expect("kind Sr")) } else { None };
                // The conversions' kernels (`dalt`, `odd_alt`) round unscaled sums: on a
                // scaled B they take A scaled up by 2^-sbk (the products unchanged), where
                // that stays below 2^127, else the block runs the f64 rounding.
                let alt_ok = sbk == 0 || ab.is_none_or(|(_, h)| h - sbk <= 126);
                // Kind Dir into a `Unit` format past the bound, 6 rows: the same runs
                // ([`tile16_dir_runs`]), where A's values scale exactly, of 16 steps, then
                // (from where a check fails) of 8, 4, 2 and 1, whose bounds are higher;
                // then the conversions' kernel, or the f64 rounding without one.
                let dir_runs = match du {
                    Some((f, _)) if !bounded && mr == MR_FMA && scale_ok(sa, ab.map(|x| x.0)) && (dalt.is_none() || alt_ok) => {
                        Some([16usize, 8, 4, 2, 1].map(|run| run_top(f, run).map(|tp| (run, tp))))
                    }
                    _ => None,
                };
                let fast = odd_alt || (!scan || fits(ab, bbk)) && (!(sr || gs.is_some() || (du.is_some() && dalt.is_none())) || bounded || track || dir_runs.is_some());
                // Kind Split on this block, else its fallback Fma; kind Dir at float16's or
                // float8_e5m2's unit (in checked runs past the bound), else their conversions.
                let kind = match (kind, dalt) {
                    (Kind16::Split, _) if !bounded => Kind16::Fma,
                    (Kind16::Dir(_), Some(alt)) if !bounded && dir_runs.is_none() => Kind16::Dir(alt),
                    (Kind16::OddUnit, _) if odd_alt => Kind16::OddE5m2,
                    (Kind16::Odd, _) if odd_fin => Kind16::OddFin,
                    (kind, _) => kind,
                };
                // This block's A (by 2^sa) and tiles (by 2^usc) scaled ([`unit_scale`]).
                let scaled = fast && (bounded || track || dir_runs.is_some()) && scaled_kind;
                let fast = fast && (scaled || alt_ok);
                let a_exp = if scaled { sa } else if fast { -sbk } else { 0 };
                if dir_runs.is_some() && dalt.is_some() {
                    let f = 2f32.powi(-sbk);
                    for g in 0..groups {
                        let r = g * kbs * mr..g * kbs * mr + kn * mr;
                        apalt[r.clone()].iter_mut().zip(&apack[r]).for_each(|(d, &x)| *d = x * f);
                    }
                }
                if a_exp != 0 {
                    let f = 2f32.powi(a_exp);
                    for g in 0..groups {
                        apack[g * kbs * mr..g * kbs * mr + kn * mr].iter_mut().for_each(|x| *x *= f);
                    }
                }
                // The f64 rounding unscales A's and B's values (exactly).
                let (aun, bun) = (2f64.powi(-a_exp), 2f64.powi(-sbk));
                let (sc, acc_un) = (2f32.powi(usc), 2f32.powi(-usc));
                if sr && fast {
                    for g in 0..groups {
                        for r in 0..mr.min(rb - g * mr) {
                            words.row_run(i0 + g * mr + r, kb, kbits, &mut urun[..kn]);
                            place_run(&urun[..kn], rbits_mask as u32, &mut upack[g * kbs * mr + r..], mr);
                        }
                    }
                }
                // One row: the kernels that cannot fail run four strips at a time, each
                // a row of a four-row tile (eight chains of adds in flight, not two),
                // on A's values repeated four times.
                let four = mr == 1 && fast && !sr && dir_runs.is_none() && ns >= 4;
                if four {
                    a4.iter_mut().take(kn * 4).enumerate().for_each(|(x, v)| *v = apack[x / 4]);
                }
                // In place: this block's full strips, where its codes hold no NaN and the
                // kernels take it; the other strips packed into `bloc`.
                let in_place = nan_free && fast && matches!(kind, Kind16::Odd | Kind16::OddFin | Kind16::Mid | Kind16::Dir(_) | Kind16::Split | Kind16::Fma | Kind16::UnitNe) && dir_runs.is_none();
                // (From strip pk0, the first one packed.)
                let pk0 = if in_place { full } else { s0 };
                if b_codes && pk0 < s1 {
                    if bloc.len() < (s1 - pk0) * kbs * 16 {
                        bloc.resize((s1 - pk0) * kbs * 16, 0.0);
                    }
                    for st in pk0..s1 {
                        let base = kb as isize * b.rs + (j0 + 16 * st) as isize;
                        // SAFETY: rows kb..kb+kn, columns j0+16st.. (at most 16, inside b);
                        // bloc[(st-pk0)*kbs*16 + kk*16 + j] = b[kb+kk, j0+16st+j], zeros past the last column.
                        unsafe { super::kernels::pack_real_any::<f32>(b, base, 1, b.rs, 16.min(jb - 16 * st), 16, kn, &mut bloc[(st - pk0) * kbs * 16..]) };
                    }
                }
                let mut k0 = kb;
                while k0 < kb + kn {
                    let k1 = (kb + kn).min(if chunk == usize::MAX { usize::MAX } else { (k0 / chunk + 1) * chunk });
                    let (o0, len) = (k0 - kb, k1 - k0);
                    // Strip-major: one packed B strip (L1-resident) meets every row group.
                    let mut s = s0;
                    while s < s1 {
                        // Strips s.. taken together (`w` of them, `sw` values apart in the panel).
                        // In place, four full strips or one; B's codes from step o0 at strip s.
                        let (w, sw) = if four && s + 4 <= if in_place { full } else { s1 } { (4, kbs * 16) } else { (1, 0) };
                        let codes = (in_place && s + w <= full).then(|| b.ptr.wrapping_offset(((kb + o0) as isize * b.rs + (j0 + 16 * s) as isize) * cb));
                        let q = (kbi * strips + s) * kbs * 16;
                        let bp = if !b_codes {
                            &bpanel[q + o0 * 16..q + (w - 1) * sw + (o0 + len) * 16]
                        } else if codes.is_some() {
                            &bloc[..0]
                        } else {
                            let q = (s - pk0) * kbs * 16;
                            &bloc[q + o0 * 16..q + (w - 1) * sw + (o0 + len) * 16]
                        };
                        // The kernels that read B in place (kinds Odd, Mid, Dir) take it as `bsrc!`.
                        macro_rules! bsrc {
                            ($bp:expr, $sw:expr) => {
                                match codes {
                                    Some(c) => BSrc::Codes { p: c, ld: b.rs, code: b_code, strips: $sw != 0 },
                                    None => BSrc::Packed($bp, $sw),
                                }
                            };
                        }
                        s += w;
                        let s = s - w;
                        for g in 0..groups {
                            let ap = if w == 4 { &a4[o0 * 4..(o0 + len) * 4] } else { &apack[g * kbs * mr + o0 * mr..g * kbs * mr + (o0 + len) * mr] };
                            let apa = if apalt.is_empty() { &apalt[..0] } else { &apalt[g * kbs * mr + o0 * mr..g * kbs * mr + (o0 + len) * mr] };
                            let t = &mut acc[(g * ns + s - s0) * tile..(g * ns + s - s0 + w) * tile];
                            let (row0, col0) = (i0 + g * mr, j0 + 16 * s);
                            // Wide bits: past a quarter of the task's tiles redone (after 8), the
                            // whole product goes to the f64 tiles instead (the same bits).
                            if wide && (gave_up.load(Relaxed) || tried >= 8 && 4 * redone > tried) {
                                gave_up.store(true, Relaxed);
                                return;
                            }
                            let (up, vp) = if sr {
                                (&upack[g * kbs * mr + o0 * mr..g * kbs * mr + (o0 + len) * mr], &vpanel[q + o0 * 16..q + (o0 + len) * 16])
                            } else {
                                (&upack[..0], &vpanel[..0])
                            };
                            let done = fast && {
                                // SAFETY: kind16 checked avx2/fma/f16c (simd); slices sized as required; B's
                                // codes in place (`codes`) of steps o0..o0+len, strips s..s+w, inside b (full strips).
                                unsafe {
                                    // Kind Sr's scale, applied by its kernels.
                                    let t_sc = if scaled { sc } else { 1.0 };
                                    // Tiles of MR_FMA (FMA) or MR_ODD rows, or of one row throughout.
                                    macro_rules! tiles {
                                        ($mf:expr, $mo:expr, $ok:ident, $inexact:ident, $sw:expr) => {
                                            match (kind, bf) {
                                                (Kind16::Fma, false) => tile16::<$mf, K_FMA, false>(t, ap, bsrc!(bp, $sw), len, spl),
                                                (Kind16::Fma, true) => tile16::<$mf, K_FMA, true>(t, ap, bsrc!(bp, $sw), len, spl),
                                                (Kind16::Split, false) => tile16::<$mf, K_SPLIT, false>(t, ap, bsrc!(bp, $sw), len, spl),
                                                (Kind16::Split, true) => tile16::<$mf, K_SPLIT, true>(t, ap, bsrc!(bp, $sw), len, spl),
                                                (Kind16::UnitNe, _) => tile16_unit::<$mo, false>(t, ap, bsrc!(bp, $sw), len, gs.map_or(21, |f| f.unit)),
                                                (Kind16::Mid, false) => tile16::<$mo, K_MID, false>(t, ap, bsrc!(bp, $sw), len, spl),
                                                (Kind16::Mid, true) => tile16::<$mo, K_MID, true>(t, ap, bsrc!(bp, $sw), len, spl),
                                                (Kind16::Odd, true) => tile16_unit::<$mo, true>(t, ap, bsrc!(bp, $sw), len, 16),
                                                (Kind16::Odd, false) => tile16_oddz::<$mf, ODD_F16>(t, ap, bsrc!(bp, $sw), len),
                                                (Kind16::OddFin, _) => tile16_oddz::<$mf, ODD_F16_FIN>(t, ap, bsrc!(bp, $sw), len),
                                                (Kind16::OddE5m2, _) => tile16_oddz::<$mo, ODD_E5M2>(t, ap, BSrc::Packed(bp, $sw), len),
                                                (Kind16::OddUnit, _) => tile16_unit::<$mo, true>(t, ap, BSrc::Packed(bp, $sw), len, gs.map_or(21, |f| f.unit)),
                                                (Kind16::Dir(to), _) if dir_runs.is_some() => {
                                                    let done = dir_checked(to, rm, t, ap, bp, len, dir_runs.as_ref().map_or(&[], |p| &p[..]));
                                                    if done < len {
                                                        // The conversions' kernel from there, on unscaled sums and
                                                        // A's values for it (exact both ways).
                                                        match dalt {
                                                            Some(alt) => {
                                                                t.iter_mut().for_each(|x| *x *= acc_un);
                                                                tile16_dir_to::<$mf>(alt, rm, t, &apa[done * mr..], BSrc::Packed(&bp[done * 16..], 0), len - done);
                                                                t.iter_mut().for_each(|x| *x *= sc);
                                                            }
                                                            None => $ok = false,
                                                        }
                                                    }
                                                }
                                                (Kind16::Dir(to), _) => {
                                                    tile16_dir_to::<$mf>(to, rm, t, ap, bsrc!(bp, $sw), len);
                                                    // (On the scaled sums of the kernel at the unit.)
                                                    if sided && matches!(to, DirTo::Unit(_)) {
                                                        dir_sided(t, spec.opts.mode == Mode::Up, sided_top);
                                                    }
                                                }
                                                (Kind16::Sr, _) if track => ($ok, $inexact) = sr_watched::<$mo>(t, ap, bp, up, vp, len, sr_unit as u32, sr_top, sr_runs, t_sc),
                                                (Kind16::Sr, _) => $inexact = tile16_sr::<$mo, SR_PLAIN>(t, ap, bp, up, vp, len, sr_unit as u32, t_sc).1,
                                            }
                                        };
                                    }
                                    // The watching kernel's tile as it was, for the f64 rounding if
                                    // some sum passed the largest value (and with wide bits, if
                                    // some f32 sum was inexact).
                                    if track || dir_runs.is_some() || wide {
                                        tsave[..t.len()].copy_from_slice(t);
                                    }
                                    let (mut ok, mut inexact) = (true, false);
                                    // Exact: the accumulators are on the format's grid. Kind Sr's
                                    // kernels scale them themselves (by `t_sc`).
                                    let outside = scaled && kind != Kind16::Sr;
                                    if outside {
                                        t.iter_mut().for_each(|x| *x *= sc);
                                    }
                                    if w == 4 {
                                        tiles!(4, 4, ok, inexact, sw)
                                    } else if mr == 1 {
                                        tiles!(1, 1, ok, inexact, 0)
                                    } else if four_in_place {
                                        tiles!(MR_ODD, MR_ODD, ok, inexact, 0)
                                    } else {
                                        tiles!(MR_FMA, MR_ODD, ok, inexact, 0)
                                    }
                                    if outside {
                                        t.iter_mut().for_each(|x| *x *= acc_un);
                                    }
                                    // Wide bits: a tile whose f32 sums were not all exact is right
                                    // still unless some add met a tie of the top `unit` bits (the
                                    // remainder's and the word's), where the bits below them decide;
                                    // a second pass on the same values finds those.
                                    if wide && ok && inexact {
                                        let tv = &mut tver[..t.len()];
                                        tv.copy_from_slice(&tsave[..t.len()]);
                                        let ties = if mr == 1 {
                                            tile16_sr::<1, SR_TIES>(tv, ap, bp, up, vp, len, sr_unit, t_sc).0
                                        } else {
                                            tile16_sr::<MR_ODD, SR_TIES>(tv, ap, bp, up, vp, len, sr_unit, t_sc).0
                                        };
                                        inexact = ties != 0;
                                    }
                                    if !ok || (wide && inexact) {
                                        t.copy_from_slice(&tsave[..t.len()]);
                                    }
                                    if wide {
                                        tried += 1;
                                        redone += usize::from(!ok || inexact);
                                    }
                                    if wide && (!ok || inexact) {
                                        let buf = buf64.get_or_insert_with(|| Sr64Buf::new(kbs));
                                        let at = (row0, col0, kb + o0);
                                        exact.sr_tile64(t, mr.min(rb - g * mr), mr, ap, aun, bp, bun, len, &words, at, rbits, (pa, pb), buf)
                                    } else {
                                        ok
                                    }
                                }
                            };
                            if !done {
                                // (Strips taken together are one row's: `w` > 1 only with `mr` = 1.)
                                for (si, kk, r) in (0..w).flat_map(|si| (0..len).flat_map(move |kk| (0..mr).map(move |r| (si, kk, r)))) {
                                    let (av, tr, br) = (ap[kk * mr * w + r] as f64 * aun, &mut t[(si * mr + r) * 16..][..16], &bp[si * sw + kk * 16..][..16]);
                                    for (j, (x, &y)) in tr.iter_mut().zip(br).enumerate() {
                                        let rd = if sr { words.bits(row0 + r, col0 + 16 * si + j, kb + o0 + kk, rbits) } else { 0 };
                                        // The product of two f32 values of <= 24 bits together is exact in f64.
                                        *x = exact.add(*x as f64, av * (y as f64 * bun), rd) as f32;
                                    }
                                }
                            }
                        }
                    }
                    if let Some(o) = outer {
                        // Float32 chunk totals `tot = round(tot + row)` lane by lane (`rd(q, l)`: the
                        // random bits of lane l of the q-th 16-lane row), then `row = 0`.
                        let scalar_totals = |tot32: &mut [f32], acc: &mut [f32], rd: &dyn Fn(usize, usize) -> u64| {
                            for (q, (tr, ar)) in tot32.chunks_exact_mut(16).zip(acc.chunks_exact_mut(16)).enumerate() {
                                for (l, (tv, av)) in tr.iter_mut().zip(ar.iter_mut()).enumerate() {
                                    *tv = o.add(*tv as f64, *av as f64, rd(q, l)) as f32;
                                    *av = 0.0;
                                }
                            }
                        };
                        // Does every sum `tot + row` stay below the largest value of `f` after a
                        // rounding that grows it by less than a unit? |tot + row| is at most the
                        // two largest magnitudes together (a NaN refuses).
                        let totals_fit = |tot32: &[f32], acc: &[f32], f: SrFmt| (abs_max32(tot32) as f64 + abs_max32(acc) as f64) * (1.0 + 2f64.powi(1 - f.prec)) < f.max;
                        if k1 % chunk == 0 || k1 == k {
                            if flush_vec {
                                // SAFETY: simd was checked (avx2/fma/f16c); lengths are multiples of 16.
                                unsafe {
                                    if let Some((to, rm2)) = outer_dir {
                                        flush_dir_to(to, rm2, &mut tot32, &mut acc)
                                    } else if bf {
                                        flush16::<true>(&mut tot32, &mut acc)
                                    } else {
                                        // Into float16 to nearest (the directed modes are outer_dir's).
                                        flush16::<false>(&mut tot32, &mut acc)
                                    }
                                };
                            } else if let Some((f, to)) = du2 {
                                if totals_fit(&tot32, &acc, f) {
                                    // SAFETY: kind16 checked avx2/fma/f16c (simd); lengths are multiples of 16.
                                    unsafe { flush_dir_to(to, rm, &mut tot32, &mut acc) };
                                } else {
                                    scalar_totals(&mut tot32, &mut acc, &|_, _| 0);
                                }
                            } else if let Some(f) = gs2 {
                                // SAFETY: kind16 checked avx2/fma (simd); equal lengths, a multiple of 16.
                                unsafe { flush_split(&mut tot32, &mut acc, split_mult(f.prec), f.max as f32, |t, r| o.add(t as f64, r as f64, 0) as f32) };
                            } else if let Some(f2) = sr2 {
                                let t2 = k + (k1 - 1) / chunk;
                                // Row r of tile (g, s) at (g * ns + s - s0) * tile + r * 16: (row, first column).
                                let place = |q: usize| (i0 + q / (ns * mr) * mr + q % mr, j0 + 16 * (s0 + q / mr % ns));
                                if totals_fit(&tot32, &acc, f2) {
                                    let ok = *sr_st0_ok.get_or_insert_with(|| {
                                        sr_st0.chunks_exact_mut(16).enumerate().all(|(q, st)| {
                                            let (row, col0) = place(q);
                                            sr_states(&rng2, index(row, col0, k), steps, k.div_ceil(chunk)).map(|v| st.copy_from_slice(&v)).is_some()
                                        })
                                    });
                                    if ok {
                                        let advance = ((t2 - k) as u32).wrapping_mul(rng2.gamma());
                                        sr_st.iter_mut().zip(&sr_st0).for_each(|(x, &x0)| *x = x0.wrapping_add(advance));
                                    } else {
                                        for (q, st) in sr_st.chunks_exact_mut(16).enumerate() {
                                            let (row, col0) = place(q);
                                            // One step: no index changes its upper word.
                                            let v = sr_states(&rng2, index(row, col0, t2), steps, 1).expect("one step");
                                            st.copy_from_slice(&v);
                                        }
                                    }
                                    let ties = rbits > f2.unit;
                                    // SAFETY: kind16 checked avx2 (simd); equal lengths, a multiple of 16; a mark for every 8 lanes.
                                    if unsafe { flush_sr(&mut tot32, &mut acc, &sr_st, rng2.gamma(), rbits.min(f2.unit), f2.unit, ties, &mut marks) } {
                                        // The kept lanes, redone with all the bits.
                                        for (i, &mk) in marks.iter().enumerate().filter(|x| *x.1 != 0) {
                                            let (row, col0) = place(i / 2);
                                            for l in (0..8).filter(|l| mk >> l & 1 != 0) {
                                                let (x, c) = (8 * i + l, col0 + 8 * (i % 2) + l);
                                                tot32[x] = o.add(tot32[x] as f64, acc[x] as f64, rng2.bits(index(row, c, t2), rbits)) as f32;
                                                acc[x] = 0.0;
                                            }
                                        }
                                    }
                                } else {
                                    scalar_totals(&mut tot32, &mut acc, &|q, l| {
                                        let (row, col0) = place(q);
                                        rng2.bits(index(row, col0 + l, t2), rbits)
                                    });
                                }
                            } else if wide {
                                // Stochastic totals on f64 lanes ([`Dyn::flush_sr_row`]), each row of
                                // the task's tiles gathered, up to 8 tiles (128 columns) at a time.
                                let t2 = (k + (k1 - 1) / chunk) as u64;
                                let (mut trow, mut arow) = ([0f64; 128], [0f64; 128]);
                                for g in 0..groups {
                                    for r in 0..mr {
                                        for sa in (0..ns).step_by(8) {
                                            let sn = 8.min(ns - sa);
                                            // Row r of tile (g, s) at (g * ns + s - s0) * tile + r * 16.
                                            let at = |s: usize| (g * ns + s) * tile + r * 16;
                                            for s in sa..sa + sn {
                                                let l = (s - sa) * 16;
                                                trow[l..l + 16].copy_from_slice(&tot64[at(s)..at(s) + 16]);
                                                arow[l..l + 16].iter_mut().zip(&acc[at(s)..at(s) + 16]).for_each(|(x, &y)| *x = y as f64);
                                            }
                                            let e0 = ((i0 + g * mr + r) * n + j0 + 16 * (s0 + sa)) as u64;
                                            let (tr, ar) = (&mut trow[..sn * 16], &arow[..sn * 16]);
                                            o.add_row(true, tr, ar, &rng2, e0, steps, t2, rbits, true, fine);
                                            for s in sa..sa + sn {
                                                let l = (s - sa) * 16;
                                                tot64[at(s)..at(s) + 16].copy_from_slice(&trow[l..l + 16]);
                                            }
                                        }
                                    }
                                }
                                acc.fill(0.0);
                            } else {
                                for (q, (tv, av)) in tot64.iter_mut().zip(acc.iter_mut()).enumerate() {
                                    // Tile (g, s) at (g * ns + s - s0) * tile, row-major mr x 16.
                                    let rd = if sr {
                                        let (g, s, r, j) = (q / (ns * tile), s0 + q / tile % ns, q % tile / 16, q % 16);
                                        rng2.bits(index(i0 + g * mr + r, j0 + 16 * s + j, k + (k1 - 1) / chunk), rbits)
                                    } else {
                                        0
                                    };
                                    *tv = o.add(*tv, *av as f64, rd);
                                    *av = 0.0;
                                }
                            }
                        }
                    }
                    k0 = k1;
                }
            }
            // Row i of the task, strip s: 16 values at ((i / mr) * ns + s - s0) * tile + (i % mr) * 16.
            let jh = jb.min(16 * s1);
            for i in 0..rb {
                let (g, r) = (i / mr, i % mr);
                for s in s0..s1 {
                    let (ja, jz) = (16 * s, jh.min(16 * s + 16));
                    if ja >= jz {
                        break;
                    }
                    let q = (g * ns + s - s0) * tile + r * 16;
                    let w = jz - ja;
                    // SAFETY: (i0+i, j0+ja..j0+jz) is inside c and only this task writes it.
                    unsafe {
                        match outer {
                            Some(_) if tot32_used => c.put_run32(i0 + i, j0 + ja, &tot32[q..q + w]),
                            Some(_) => c.put_run64(i0 + i, j0 + ja, &tot64[q..q + w], false),
                            None => c.put_run32(i0 + i, j0 + ja, &acc[q..q + w]),
                        }
                    }
                }
            }
        };
        parallel::for_each_item(rblocks * csplit, &task);
    };
    all();
    Ok(!gave_up.load(Relaxed))
}

/// Lines of 16-bit codes into rows of 16, for [`drive`]'s few-row path:
/// `dst[kk*16 + l]` = code `kk` of line `l` (`off + l*cs` codes from `p`, its
/// `seg` codes contiguous) for `l < w`, zero for the other lines: 8 x 8
/// blocks transposed in registers (three rounds of unpacks), the last steps
/// one at a time.
///
/// # Safety
/// The CPU must support avx2; the `w` lines' `seg` codes must be readable;
/// `w <= 16` and `dst.len() >= seg * 16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose16(p: *const u16, off: isize, cs: isize, w: usize, seg: usize, dst: &mut [u16]) {
    use std::arch::x86_64::*;
    assert!(w <= 16 && dst.len() >= seg * 16);
    let full = seg / 8 * 8;
    for h in 0..2 {
        let lines: [*const u16; 8] = std::array::from_fn(|l| p.wrapping_offset(off + (8 * h + l) as isize * cs));
        let live: [bool; 8] = std::array::from_fn(|l| 8 * h + l < w);
        // SAFETY: the loads read codes kk..kk+8 < seg of live lines (readable per the
        // contract); the stores write dst's rows kk..kk+8 < seg (asserted).
        unsafe {
            let mut kk = 0;
            while kk < full {
                let r: [__m128i; 8] = std::array::from_fn(|l| if live[l] { _mm_loadu_si128(lines[l].add(kk) as *const __m128i) } else { _mm_setzero_si128() });
                // Pairs of lines interleaved, then pairs of pairs: each vector two steps
                // of four lines; then the two halves of the lines joined.
                let a: [__m128i; 8] = std::array::from_fn(|q| {
                    let (x, y) = (r[2 * (q / 2)], r[2 * (q / 2) + 1]);
                    if q % 2 == 0 { _mm_unpacklo_epi16(x, y) } else { _mm_unpackhi_epi16(x, y) }
                });
                // b[q]: steps 2q, 2q+1 of lines 0-3 (q < 4) or 4-7 (q - 4).
                let b: [__m128i; 8] = std::array::from_fn(|q| {
                    let g = 4 * (q / 4);
                    let (x, y) = (a[g + (q % 4) / 2], a[g + 2 + (q % 4) / 2]);
                    if q % 2 == 0 { _mm_unpacklo_epi32(x, y) } else { _mm_unpackhi_epi32(x, y) }
                });
                for q in 0..8 {
                    let (x, y) = (b[q / 2], b[4 + q / 2]);
                    let c = if q % 2 == 0 { _mm_unpacklo_epi64(x, y) } else { _mm_unpackhi_epi64(x, y) };
                    _mm_storeu_si128(dst.as_mut_ptr().add((kk + q) * 16 + 8 * h) as *mut __m128i, c);
                }
                kk += 8;
            }
            for kk in full..seg {
                for l in 0..8 {
                    dst[kk * 16 + 8 * h + l] = if live[l] { *lines[l].add(kk) } else { 0 };
                }
            }
        }
    }
}

std::thread_local! {
    /// The panels of [`drive`]'s tasks (B's values, the columns' words and their
    /// placed bits), kept by each thread from one task to the next and from one
    /// product to the next, so that a product of many column blocks (a
    /// vector-matrix product: one per 128 columns) neither allocates nor faults
    /// in fresh pages for each. At most 3 x 256 x 136 words (about 0.8 MB) a thread.
    static DRIVE_PANELS: std::cell::RefCell<(Vec<f64>, Vec<u64>, Vec<u64>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// `c = a @ b`, every add rounded by `r` (chunk totals by `outer`): the f64
/// register tiles, the step path and the one-column chains. `tr` when this is
/// [`run`]'s transposed product, whose words of rows and columns trade places.
fn drive<R: Round>(r: &R, a: &Operand, b: &Operand, c: EmuOut, spec: &AccumSpec, outer: Option<&Dyn>, tr: bool) -> Result<()> {
    let (m, n, k) = (a.rows, b.cols, a.cols);
    if m == 0 || n == 0 {
        return Ok(());
    }
    let stochastic = spec.opts.mode == Mode::Stochastic && (R::STOCHASTIC || outer.is_some());
    // The products' adds draw their bits from `words` (words of rows and columns,
    // [`StepRand`]); the chunk totals' from `rng2`, keyed by (element, step).
    let words_used = stochastic && R::STOCHASTIC;
    let sum_exact = sums_exact_f64(&spec.fmt, a, b);
    let rng2 = Rng::new(chunk_opts(spec.opts).key);
    let rbits = spec.opts.rbits;
    let chunk = spec.chunk.map(|(cs, _)| cs).unwrap_or(usize::MAX);
    let fine = totals_fine(spec);
    // Formats without -0 (fnuz, posits): the kernels' -0 is their zero ([`no_neg_zero`]).
    let (inner_nz, final_nz) = (no_neg_zero(&spec.fmt), spec.chunk.map_or(no_neg_zero(&spec.fmt), |(_, f2)| no_neg_zero(&f2)));
    let nchunks = if outer.is_some() { k.div_ceil(chunk) } else { 0 };
    let steps = (k + nchunks) as u64;
    let words = StepRand::new(spec.opts.key, steps);
    let words = if tr { words.transposed() } else { words };
    let simd = super::simd();
    let tiled = r.has_tile(simd, rbits);
    // The stochastic tile toward zero, on A's values scaled by 2^sr_scale; or the
    // tile to nearest from sums toward zero, for sums not exact in f64.
    let sr_scale = if tiled && words_used { r.sr_scale(simd, rbits) } else { None };
    let ne_scale = if tiled && !words_used && !sum_exact { r.ne_tile_scale(simd) } else { None };
    let scaled = sr_scale.or(ne_scale);
    // Where the tiles' words go: the format's unit is bit `dunit` of the f64 pattern.
    let dunit = (53 - r.prec()).max(1) as u32;
    let (prec_a, prec_b) = (a.format().map_or(53, |f| profile(&f).0), b.format().map_or(53, |f| profile(&f).0));
    let fbounds = value_bounds(&spec.fmt);
    // Register tiles reuse a packed B panel over more rows; with more than one
    // thread and few column blocks (a product of few columns), the rows are split
    // further, so that each thread has two tasks (blocks of at least RB rows).
    let cblocks = n.div_ceil(JB);
    let threads = parallel::num_threads();
    let rbs = if !tiled {
        RB
    } else if threads > 1 {
        let want = (2 * threads).div_ceil(cblocks);
        (16 * RB).min(m.div_ceil(want).next_multiple_of(TILE_ROWS).max(RB))
    } else {
        16 * RB
    };
    let rblocks = m.div_ceil(rbs);
    // Products of few rows, stochastic on f64 lanes ([`sr64_rows`]): where a row's
    // work is a column word per add, B's values are read once (bfloat16 and
    // float16 codes in place, others packed 16 columns at a time) and the
    // columns' words drawn in the kernel, not placed in panels first; A's rows
    // go two at a time, not in tiles of four.
    let few = sr_scale.is_some() && rbits <= 32 && m <= FEW_ROWS && n > 1;
    // B's codes the kernel reads in place (rows contiguous), or whose bounds a scan
    // of the codes takes (columns contiguous, as a matrix-vector product's).
    let few_dec = match (&b.dec, super::kernels::fp8_kind(b.format())) {
        (super::Dec::Bf16, _) => Some(ROWS_BF16),
        (super::Dec::F16, _) => Some(ROWS_F16),
        (super::Dec::Lut8(_), Some(super::kernels::FP8_E5M2)) => Some(ROWS_E5M2),
        (super::Dec::Lut8(_), Some(super::kernels::FP8_E4M3FN)) => Some(ROWS_E4M3FN),
        _ => None,
    };
    let few_src = few_dec.filter(|_| b.cs == 1);
    // Bytes a code of B; the power of two that A's values take on besides the scale
    // (e4m3fn codes decode to 2^-8 times their values).
    let few_cb = b.storage.bytes() as isize;
    let few_up = if few_src == Some(ROWS_E4M3FN) { 8 } else { 0 };
    let task = |t: usize| {
        let (ib, jbk) = (t / cblocks, t % cblocks);
        let (i0, j0) = (ib * rbs, jbk * JB);
        let rb = rbs.min(m - i0);
        let jb = JB.min(n - j0);
        // Register tiles read the panel tile by tile: with `tmaj`, the 8 columns
        // of tile q at step kk are `panel[q*(8*kn + 8) + kk*8..][..8]` (the last
        // tile padded with zeros; 8 zeros after each tile, so that the tiles of a
        // depth block of 256 steps do not start 16 KiB apart, which the placing
        // of a step's column words across them would meet in one set of the L1),
        // else `panel[kk*jb + j]`.
        let tmaj = tiled && n > 1;
        let wpad = if tmaj { jb.div_ceil(8) * 8 } else { jb };
        let tpad = if tmaj { 8 } else { 0 };
        // The accumulators' rows, `ld` apart: with `tmaj` padded to whole tiles, so
        // that the last tile of a width that is no multiple of 8 runs as a register
        // tile too (its padding columns, on the panel's zeros, are never stored).
        let ld = wpad;
        let mut acc = vec![0f64; rb * ld];
        let mut tot = vec![0f64; if outer.is_some() { rb * ld } else { 0 }];
        // The panels are this thread's kept buffers ([`DRIVE_PANELS`]), put back at the
        // end of the task: every value a tile or step reads is written first in each
        // depth block (the words of padding columns aside, which only the padding
        // columns' adds, never stored, draw).
        let (mut panel_buf, mut vpan_buf, mut vpl_buf) = DRIVE_PANELS.with(|c| c.take());
        let panel_len = KB.min(k.max(1)) * wpad + tpad * (wpad / 8);
        // (Each starting on a cache line: the tiles' rows of 8 values then do not
        // straddle two, whatever address the allocation got.)
        fn kept<T: Copy + Default>(v: &mut Vec<T>, len: usize) -> &mut [T] {
            if v.len() < len + 8 {
                v.resize(len + 8, T::default());
            }
            let off = v.as_ptr().align_offset(64).min(8);
            &mut v[off..off + len]
        }
        let panel = kept(&mut panel_buf, panel_len);
        // The column words of the panel's steps, laid out as the panel, when drawn.
        let vpan_len = if words_used { panel_len } else { 0 };
        let vpan = kept(&mut vpan_buf, vpan_len);
        let mut wrow = vec![0u64; if tmaj && words_used { jb } else { 0 }];
        let (mut rands, mut old, mut bad) = (vec![0u64; jb], vec![0f64; jb], vec![0u8; jb]);
        // One depth step of a row segment, `row[j] = round(row[j] + av*bp[j])`; the
        // row's word `u` and the columns' `vw` at this step (used when stochastic).
        let mut step_row = |row: &mut [f64], bp: &[f64], av: f64, u: u64, vw: &[u64]| {
            if let ([x], [bv]) = (&mut *row, bp) {
                // One column (a 1-D sum; a matrix-vector product as given): the scalar add,
                // which the lanes of `step` equal.
                let rd = if words_used { StepRand::top(u ^ vw[0], rbits) } else { 0 };
                *x = r.add(*x, av * bv, rd);
                return;
            }
            if words_used {
                if !r.step_st(simd, row, bp, av, u, vw, rbits, sum_exact) {
                    fill_rands(u, vw, rbits, &mut rands[..row.len()]);
                    r.step(simd, row, bp, av, &rands, &mut old, &mut bad);
                }
            } else {
                r.step(simd, row, bp, av, &rands, &mut old, &mut bad);
            }
        };
        let mut apk = vec![0f64; if tiled { KB.min(k.max(1)) * TILE_ROWS } else { 0 }];
        // The rows' placed words of the tiles ([`Words::place_row`]), `upl[kk*TILE_ROWS + r]`
        // as A's values, and A's values scaled for the stochastic tile.
        let mut upl = vec![0u64; if tiled && words_used { KB.min(k.max(1)) * TILE_ROWS } else { 0 }];
        let vpl_len = if tmaj && words_used { vpan_len } else { 0 };
        let vpl = kept(&mut vpl_buf, vpl_len);
        let mut aps = vec![0f64; if scaled.is_some() { apk.len() } else { 0 }];
        let mut urun = vec![0u64; if tiled && words_used { KB.min(k.max(1)) } else { 0 }];
        // Chunk totals of row i (of this task) after step kidx, when a chunk ends there.
        let flush = |acc: &mut [f64], tot: &mut [f64], i: usize, kidx: usize| {
            let Some(o) = outer else { return };
            if !(kidx + 1).is_multiple_of(chunk) && kidx + 1 != k {
                return;
            }
            let ridx = kidx / chunk;
            let e0 = ((i0 + i) * n + j0) as u64;
            let (row, trow) = (&mut acc[i * ld..i * ld + jb], &mut tot[i * ld..i * ld + jb]);
            if inner_nz {
                row.iter_mut().for_each(|x| *x += 0.0);
            }
            o.add_row(simd, trow, row, &rng2, e0, steps, (k + ridx) as u64, rbits, stochastic, fine);
            // (The padding columns too.)
            acc[i * ld..(i + 1) * ld].fill(0.0);
        };
        // One column (1-D sums; matrix-vector products as given): per row, a chain of
        // dependent adds over packed segments of A and B, the same adds and
        // random bits as `step_row` and `flush`.
        let mut arow = vec![0f64; if n == 1 { KB.min(k.max(1)) } else { 0 }];
        // The few-row path's group of 16 columns of B (`[kk*16 + l]`), its pairs of
        // rows' scaled values and placed words, broadcast, and values, and a step's
        // column words for the step path.
        let few_len = if few { KB.min(k.max(1)) } else { 0 };
        let mut gbuf = vec![0f64; few_len * 16];
        // A B of 16-bit codes whose columns are contiguous (a matrix-vector product's,
        // run transposed): a group's codes moved into rows of 16 (`[kk*16 + l]`,
        // zeros past w), which the kernel decodes as it does codes in place.
        let tcodes = few && few_src.is_none() && b.rs == 1 && matches!(few_dec, Some(ROWS_BF16 | ROWS_F16));
        let mut cbuf = vec![0u16; if tcodes { few_len * 16 } else { 0 }];
        let (mut apb, mut upb) = (vec![0f64; few_len * FEW_ROWS * 4], vec![0u64; few_len * FEW_ROWS * 4]);
        let mut araw = vec![0f64; few_len * FEW_ROWS.next_multiple_of(2)];
        let mut vbuf = [0u64; 16];
        for kb in (0..k).step_by(KB) {
            let kn = KB.min(k - kb);
            let base = kb as isize * b.rs + j0 as isize * b.cs;
            if few {
                let sc = sr_scale.expect("few needs the scale");
                // The columns' Weyl step, and the step from one column's values to the next's.
                let gamma = words.col_gamma();
                let cstep = (steps as u32).wrapping_mul(gamma);
                // The bounds of B's codes in `rows` runs of `cols` contiguous ones from
                // element `off`, `ld` elements apart (of a `few_dec` decoding): those of
                // the block for codes in place (whose scan also brings them into the
                // cache), of each group for columns contiguous; of each group's packed
                // values otherwise.
                let scan = |off: isize, ld: isize, rows: usize, cols: usize| -> Bounds64 {
                    // SAFETY: the caller's runs are inside b.
                    let scan = unsafe { operand_code_scan(b, off, ld, rows, cols) };
                    let (lo, hi, top) = scan.expect("few_dec names decodings the scan reads");
                    (exp_bounds_of(lo, hi, prec_b), top >= 0x7f80_0000)
                };
                // (Rows kb..kb+kn, columns j0..j0+jb.)
                let b_codes = few_src.map(|_| scan(base, b.rs, kn, jb));
                // A's rows in pairs: their values (apk, then `araw[(g*kn + kk)*2 + r]`
                // for the step path), bounds, and (where they scale exactly) their
                // scaled values and placed words, broadcast (`[g*kn*8 + (kk*nr + r)*4 + l]`).
                let mut a_pairs = [((None, false), false); FEW_ROWS.div_ceil(2)];
                for (g, pair) in a_pairs.iter_mut().enumerate().take(rb.div_ceil(2)) {
                    let (i, nr) = (2 * g, 2.min(rb - 2 * g));
                    let abase = (i0 + i) as isize * a.rs + kb as isize * a.cs;
                    // SAFETY: rows i0+i..i0+i+nr and columns kb..kb+kn are inside a;
                    // apk[kk*TILE_ROWS + r] = a[i0+i+r, kb+kk].
                    unsafe { super::kernels::pack_real_any::<f64>(a, abase, a.rs, a.cs, nr, TILE_ROWS, kn, &mut apk) };
                    let ab64 = exp_bounds64_of(&apk[..kn * TILE_ROWS], prec_a);
                    // A's values scale exactly (as for the tiles).
                    let a_ok = !ab64.1 && ab64.0.is_none_or(|(lo, _)| lo + sc >= -1074);
                    *pair = (ab64, a_ok);
                    for kk in 0..kn {
                        araw[(g * kn + kk) * 2..][..nr].copy_from_slice(&apk[kk * TILE_ROWS..kk * TILE_ROWS + nr]);
                    }
                    if a_ok {
                        let f = pow2(sc + few_up);
                        let (ap, up) = (&mut apb[g * kn * 8..], &mut upb[g * kn * 8..]);
                        for kk in 0..kn {
                            for rr in 0..nr {
                                ap[(kk * nr + rr) * 4..][..4].fill(apk[kk * TILE_ROWS + rr] * f);
                            }
                        }
                        for rr in 0..nr {
                            words.row_run(i0 + i + rr, kb, rbits, &mut urun[..kn]);
                            for (kk, &u) in urun[..kn].iter().enumerate() {
                                up[(kk * nr + rr) * 4..][..4].fill(Words::place_row(u, rbits, dunit));
                            }
                        }
                    }
                }
                // The steps up to each chunk's end, then its totals (as the tiles); each
                // group of 16 columns of B, read or packed once for all the pairs of rows.
                let mut kk0 = 0;
                while kk0 < kn {
                    let kidx0 = kb + kk0;
                    let seg = if outer.is_some() { (chunk - kidx0 % chunk).min(kn - kk0) } else { kn - kk0 };
                    for j in (0..jb).step_by(16) {
                        let w = 16.min(jb - j);
                        let code = few_src.filter(|_| w == 16);
                        let gbase = base + kk0 as isize * b.rs + j as isize * b.cs;
                        // SAFETY: rows kidx0..kidx0+seg and columns j0+j..j0+j+w are inside b;
                        // gbuf[kk*16 + l] = b[kidx0+kk, j0+j+l], zeros past w.
                        let pack = |gbuf: &mut [f64]| unsafe { super::kernels::pack_real_any::<f64>(b, gbase, b.cs, b.rs, w, 16, seg, gbuf) };
                        // (`packed`: gbuf holds the values; `shrunk`: times 2^-few_up, for A's
                        // values scaled for the codes in place, in a last group packed.)
                        let (mut packed, mut shrunk) = (code.is_none() && !tcodes, false);
                        if packed {
                            pack(&mut gbuf);
                        }
                        #[cfg(target_arch = "x86_64")]
                        if tcodes {
                            // SAFETY: columns j0+j..j0+j+w, rows kidx0..kidx0+seg (each column's
                            // contiguous) are inside b; cbuf holds seg rows of 16; simd() holds.
                            unsafe { transpose16(b.ptr as *const u16, gbase, b.cs, w, seg, &mut cbuf) };
                        }
                        let pb64 = match (b_codes, few_dec) {
                            // (The block's, a superset.)
                            (Some(bb), _) => bb,
                            // Columns contiguous: the group's w columns of seg codes.
                            (None, Some(_)) if b.rs == 1 => scan(gbase, b.cs, w, seg),
                            _ => exp_bounds64_of(&gbuf[..seg * 16], prec_b),
                        };
                        if packed && few_up != 0 {
                            // (Exact: e4m3fn's values are far from f64's subnormals.)
                            let f = pow2(-few_up);
                            gbuf[..seg * 16].iter_mut().for_each(|x| *x *= f);
                            shrunk = true;
                        }
                        // The columns' Weyl values, a step before the segment's first: column
                        // c's index is c * steps more than the first column's, so its value
                        // c * steps * gamma more, while the indices of the group's steps
                        // (the first column's first to the last's last) keep their high half.
                        let (w0, hi) = words.col_weyl(j0 + j, kidx0);
                        let same = words.col_weyl(j0 + j + w - 1, kidx0 + seg - 1).1 == hi;
                        let mut weyl = [0u32; 16];
                        for h in 0..2 {
                            for (l, &c) in ROWS_LANES.iter().enumerate() {
                                weyl[h * 8 + l] = w0.wrapping_add(((8 * h + c) as u32).wrapping_mul(cstep)).wrapping_sub(gamma);
                            }
                        }
                        for (g, &(ab64, a_ok)) in a_pairs.iter().enumerate().take(rb.div_ceil(2)) {
                            let (i, nr) = (2 * g, 2.min(rb - 2 * g));
                            let blk = match code {
                                Some(code) => {
                                    // (Codes of `few_cb` bytes.) The first pair of rows, in the
                                    // first groups of the block, prefetches the next block's
                                    // codes, a line of each row each: group q its rows' q-th
                                    // line (one more than the row's bytes fill: its codes need
                                    // not start a line).
                                    let pb = b.ptr.wrapping_offset(gbase * few_cb);
                                    let q = j / 16;
                                    let pf = if g == 0 && kb + KB < k && q <= (jb * few_cb as usize).div_ceil(64) {
                                        b.ptr.wrapping_offset((base + (KB + kk0) as isize * b.rs) * few_cb).wrapping_add(64 * q)
                                    } else {
                                        pb
                                    };
                                    RowsBlock { src: code, pb, ld: b.rs * few_cb, pf: (pf, b.rs * few_cb), weyl: &weyl, gamma }
                                }
                                None if tcodes => {
                                    let pb = cbuf.as_ptr() as *const u8;
                                    RowsBlock { src: few_dec.expect("tcodes has a decoding"), pb, ld: 32, pf: (pb, 32), weyl: &weyl, gamma }
                                }
                                None => {
                                    let pb = gbuf.as_ptr() as *const u8;
                                    RowsBlock { src: ROWS_F64, pb, ld: 128, pf: (pb, 128), weyl: &weyl, gamma }
                                }
                            };
                            let (ap, up) = (&apb[g * kn * 8 + kk0 * nr * 4..], &upb[g * kn * 8 + kk0 * nr * 4..]);
                            // SAFETY: the segment's seg steps of 16 values (gbuf) or codes (inside
                            // b: w == 16 columns of row-major codes; or cbuf) are readable.
                            let done = a_ok && same && unsafe { r.rows_sr(nr, w, &mut acc[i * ld + j..], ld, ap, up, blk, seg, rbits, ab64, pb64) };
                            if done {
                                continue;
                            }
                            if !packed || shrunk {
                                pack(&mut gbuf);
                                (packed, shrunk) = (true, false);
                            }
                            for rr in 0..nr {
                                let row0 = (i + rr) * ld + j;
                                for kk in 0..seg {
                                    let kidx = kidx0 + kk;
                                    words.col_run(j0 + j, kidx, rbits, &mut vbuf[..w]);
                                    let av = araw[(g * kn + kk0 + kk) * 2 + rr];
                                    step_row(&mut acc[row0..row0 + w], &gbuf[kk * 16..kk * 16 + w], av, words.row(i0 + i + rr, kidx, rbits), &vbuf[..w]);
                                }
                            }
                        }
                    }
                    kk0 += seg;
                    for rr in 0..rb {
                        flush(&mut acc, &mut tot, rr, kb + kk0 - 1);
                    }
                }
                continue;
            }
            // The tiles' stride in the panels.
            let ts = 8 * kn + tpad;
            if tmaj {
                // Rows contiguous: in bands of 16 rows across the tiles (a band's rows
                // read side by side, the next band's prefetched first); else tile by tile.
                let band = if b.cs == 1 { 16 } else { kn.max(1) };
                for r0 in (0..kn).step_by(band) {
                    let rn = band.min(kn - r0);
                    if r0 + rn < kn {
                        super::driver::prefetch_rows(b, base + (r0 + rn) as isize * b.rs, b.rs, jb, band.min(kn - r0 - rn));
                    }
                    for q in 0..jb.div_ceil(8) {
                        // SAFETY: rows kb+r0..kb+r0+rn and columns j0+8q..j0+8q+w are inside b;
                        // panel[q*ts + kk*8 + l] = b[kb+kk, j0+8q+l], zeros past w.
                        unsafe { super::kernels::pack_real_any::<f64>(b, base + r0 as isize * b.rs + (8 * q) as isize * b.cs, b.cs, b.rs, (jb - 8 * q).min(8), 8, rn, &mut panel[q * ts + r0 * 8..]) };
                    }
                }
                for q in 0..jb.div_ceil(8) {
                    // (A longer block's values may lie where this one's zeros go.)
                    panel[q * ts + 8 * kn..(q + 1) * ts].fill(0.0);
                }
            } else {
                // SAFETY: rows kb..kb+kn and columns j0..j0+jb are inside b; the panel
                // holds kn rows of jb values, panel[kk*jb + j] = b[kb+kk, j0+j].
                unsafe { super::kernels::pack_real_any::<f64>(b, base, b.cs, b.rs, jb, jb, kn, panel) };
            }
            if words_used {
                for kk in 0..kn {
                    if tmaj {
                        // Tile q's 8 words of step kk at q*ts + kk*8, as the panel.
                        words.col_run(j0, kb + kk, rbits, &mut wrow);
                        place_step_cols(simd, &wrow, kk, ts, rbits, dunit, vpan, vpl);
                    } else {
                        words.col_run(j0, kb + kk, rbits, &mut vpan[kk * jb..(kk + 1) * jb]);
                    }
                }
            }
            if n == 1 {
                for i in 0..rb {
                    // SAFETY: row i0+i and columns kb..kb+kn are inside a; arow[kk] = a[i0+i, kb+kk].
                    unsafe { super::kernels::pack_real_any::<f64>(a, (i0 + i) as isize * a.rs + kb as isize * a.cs, a.rs, a.cs, 1, 1, kn, &mut arow) };
                    let e = (i0 + i) as u64;
                    let mut x = acc[i];
                    for (kk, (&av, &bv)) in arow[..kn].iter().zip(&panel[..kn]).enumerate() {
                        let kidx = kb + kk;
                        let rd = if words_used { StepRand::top(words.row(i0 + i, kidx, rbits) ^ vpan[kk], rbits) } else { 0 };
                        // Without branches on the data: each mispredicted rounding
                        // direction would stall the chain. Rare cases redone.
                        let (v, bad) = r.add_fast(x, av * bv, rd);
                        x = if bad { r.add(x, av * bv, rd) } else { v };
                        if let Some(o) = outer {
                            if (kidx + 1) % chunk == 0 || kidx + 1 == k {
                                let ridx = (kidx / chunk) as u64;
                                let rd = if stochastic { rng2.bits(e.wrapping_mul(steps).wrapping_add(k as u64 + ridx), rbits) } else { 0 };
                                tot[i] = o.add(tot[i], if inner_nz { x + 0.0 } else { x }, rd);
                                x = 0.0;
                            }
                        }
                    }
                    acc[i] = x;
                }
                continue;
            }
            if tiled {
                // Sums exact in f64 for this block's values (see `block_exact`)?
                // (The tiles run only tile-major: here n > 1.)
                let pb64 = exp_bounds64_of(&panel[..(wpad / 8) * ts], prec_b);
                // Register tiles: TILE_ROWS rows, 8 columns, the steps up to the next chunk end.
                for i in (0..rb).step_by(TILE_ROWS) {
                    let nr = TILE_ROWS.min(rb - i);
                    let abase = (i0 + i) as isize * a.rs + kb as isize * a.cs;
                    // SAFETY: rows i0+i..i0+i+nr and columns kb..kb+kn are inside a;
                    // apk[kk*TILE_ROWS + r] = a[i0+i+r, kb+kk], zeros past row nr.
                    unsafe { super::kernels::pack_real_any::<f64>(a, abase, a.rs, a.cs, nr, TILE_ROWS, kn, &mut apk) };
                    // (Zeros pad the rows past nr; bounds ignore zeros.)
                    let ab64 = exp_bounds64_of(&apk[..kn * TILE_ROWS], prec_a);
                    // The rows' placed words.
                    if words_used {
                        place_tile_rows(&words, i0 + i, nr, kb, rbits, dunit, &mut urun[..kn], &mut upl);
                    }
                    // The tiles on scaled values (stochastic, or to nearest from sums
                    // toward zero): A's values of the strip scale exactly.
                    let sr_on = match scaled {
                        Some(sc) if !ab64.1 && !pb64.1 && ab64.0.is_none_or(|(lo, _)| lo + sc >= -1074) => {
                            let f = pow2(sc);
                            for (d, &x) in aps[..kn * TILE_ROWS].iter_mut().zip(&apk[..kn * TILE_ROWS]) {
                                *d = x * f;
                            }
                            true
                        }
                        _ => false,
                    };
                    let exact = sum_exact || block_exact(fbounds, ab64.0, pb64.0);
                    let mut kk0 = 0;
                    while kk0 < kn {
                        let kidx0 = kb + kk0;
                        let seg = if outer.is_some() { (chunk - kidx0 % chunk).min(kn - kk0) } else { kn - kk0 };
                        let ap = &apk[kk0 * TILE_ROWS..];
                        let upp = if words_used { &upl[kk0 * TILE_ROWS..] } else { &upl[..0] };
                        let mut j = 0;
                        while j < jb {
                            let w = if j + 8 <= jb { 8 } else { jb - j };
                            // This tile's panel, column words and placed words from step kk0 (row stride 8).
                            let t0 = j / 8 * ts + kk0 * 8;
                            let bp = &panel[t0..];
                            let (vp, vpp) = if words_used { (&vpan[t0..], &vpl[t0..]) } else { (&vpan[..0], &vpl[..0]) };
                            let tw = if words_used { Words { rows: upp, cols: vpp, ldv: 8 } } else { Words::NONE };
                            let tile = |acc: &mut [f64]| {
                                if sr_on && r.tile_sr(nr, &mut acc[i * ld + j..], ld, &aps[kk0 * TILE_ROWS..], bp, 8, seg, tw, rbits, ab64, pb64) {
                                    return true;
                                }
                                if sr_on && !exact && r.tile_ne(nr, &mut acc[i * ld + j..], ld, &aps[kk0 * TILE_ROWS..], bp, 8, seg, ab64, pb64) {
                                    return true;
                                }
                                let tile_vals = || (0..nr).flat_map(|rr| &acc[(i + rr) * ld + j..(i + rr) * ld + j + w]);
                                let amax = abs_max(tile_vals());
                                // Sums that cannot leave the normal range need no watching.
                                let track = !r.quiet(ab64, pb64, amax, seg);
                                // Sums exact for this tile's values, if not for the block's formats.
                                let exact = exact || r.exact_vals(exp_bounds64(tile_vals(), r.prec()), amax, ab64, pb64, seg);
                                r.tile(simd, nr, &mut acc[i * ld + j..], ld, ap, bp, 8, seg, tw, rbits, exact, track)
                            };
                            if !tile(&mut acc) {
                                for rr in 0..nr {
                                    let row = &mut acc[(i + rr) * ld + j..(i + rr) * ld + j + w];
                                    for kk in 0..seg {
                                        let bpk = &bp[kk * 8..kk * 8 + w];
                                        let (u, vw) = if words_used { (words.row(i0 + i + rr, kidx0 + kk, rbits), &vp[kk * 8..kk * 8 + w]) } else { (0, &vp[..0]) };
                                        step_row(row, bpk, ap[kk * TILE_ROWS + rr], u, vw);
                                    }
                                }
                            }
                            j += w;
                        }
                        kk0 += seg;
                        for rr in 0..nr {
                            flush(&mut acc, &mut tot, i + rr, kb + kk0 - 1);
                        }
                    }
                }
                continue;
            }
            for i in 0..rb {
                for kk in 0..kn {
                    let kidx = kb + kk;
                    let row = &mut acc[i * ld..i * ld + jb];
                    // SAFETY: (i0+i, kidx) is inside a.
                    // (Quieted as the packed operands are: see `pack_real_any`.)
                    let av = super::kernels::Real::quiet(unsafe { a.get_f64(i0 + i, kidx) });
                    let (u, vw) = if words_used { (words.row(i0 + i, kidx, rbits), &vpan[kk * jb..(kk + 1) * jb]) } else { (0, &vpan[..0]) };
                    step_row(row, &panel[kk * jb..(kk + 1) * jb], av, u, vw);
                    flush(&mut acc, &mut tot, i, kidx);
                }
            }
        }
        let res = if outer.is_some() { &tot } else { &acc };
        for i in 0..rb {
            // SAFETY: (i0+i, j0..j0+jb) is inside c and only this task writes it.
            unsafe { c.put_run64(i0 + i, j0, &res[i * ld..i * ld + jb], final_nz) };
        }
        DRIVE_PANELS.with(|c| c.replace((panel_buf, vpan_buf, vpl_buf)));
    };
    parallel::for_each_item(rblocks * cblocks, &task);
    Ok(())
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// One 8-lane add of the tile kernel of `kind` into float16 in `mode` (`bf`:
    /// bfloat16; [`Kind16::Dir`]: into its own format), `acc + a * b` lane by
    /// lane; `None` without avx2/fma/f16c.
    /// [`Kind16::Split`]'s rounding of 8 f32 lanes to nearest-even at `prec`
    /// bits (its add with a zero product); `None` without avx2/fma.
    pub fn split_lanes(prec: i32, s: [f32; 8]) -> Option<[f32; 8]> {
        #[cfg(target_arch = "x86_64")]
        if crate::convert::detected_isa() >= crate::convert::Isa::Avx2 {
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn go(prec: i32, s: [f32; 8]) -> [f32; 8] {
                use std::arch::x86_64::*;
                let mut out = [0f32; 8];
                // SAFETY: 8-lane loads and stores of 8-element arrays; features per the caller.
                unsafe {
                    let z = _mm256_setzero_ps();
                    let r = add16::<K_SPLIT, false>(_mm256_loadu_ps(s.as_ptr()), z, z, _mm256_set1_ps(split_mult(prec)));
                    _mm256_storeu_ps(out.as_mut_ptr(), r);
                }
                out
            }
            // SAFETY: avx2, fma and f16c were detected.
            return Some(unsafe { go(prec, s) });
        }
        let _ = (prec, s);
        None
    }

    pub fn add16_lanes(kind: Kind16, bf: bool, mode: Mode, acc: [f32; 8], a: f32, b: [f32; 8]) -> Option<[f32; 8]> {
        // Only the directed kernels round in other modes than nearest-even.
        assert!(matches!(kind, Kind16::Dir(_)) == (mode != Mode::NearestEven), "{kind:?} does not round {mode:?}");
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn go(kind: Kind16, bf: bool, rm: i32, acc: [f32; 8], a: f32, b: [f32; 8]) -> [f32; 8] {
                use std::arch::x86_64::*;
                let mut out = [0f32; 8];
                // SAFETY: 8-lane loads and stores of 8-element arrays; features per the caller.
                unsafe {
                    let (c, av, bv) = (_mm256_loadu_ps(acc.as_ptr()), _mm256_set1_ps(a), _mm256_loadu_ps(b.as_ptr()));
                    // A one-row tile kernel on the 8 lanes (padded to 16 columns).
                    macro_rules! one_row {
                        ($t:ident, $bp:ident => $call:expr) => {{
                            let mut $t = [0f32; 16];
                            $t[..8].copy_from_slice(&acc);
                            let mut $bp = [0f32; 16];
                            $bp[..8].copy_from_slice(&b);
                            $call;
                            _mm256_loadu_ps($t.as_ptr())
                        }};
                    }
                    // The tile kernel of `$mr` rows (`$many`), every row the 8 lanes:
                    // each row must match the one-row kernel's (`$one`).
                    macro_rules! rows {
                        ($mr:literal, $one:expr, $many:expr) => {{
                            let one = one_row!(t, bp => $one(&mut t, &[a], &bp, 1));
                            let mut t = [0f32; 16 * $mr];
                            t.chunks_mut(16).for_each(|r| r[..8].copy_from_slice(&acc));
                            let mut bp = [0f32; 16];
                            bp[..8].copy_from_slice(&b);
                            $many(&mut t, &[a; $mr], &bp, 1);
                            let mut o = [0f32; 8];
                            _mm256_storeu_ps(o.as_mut_ptr(), one);
                            for r in t.chunks(16) {
                                assert!(r[..8].iter().zip(&o).all(|(x, y)| x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan()), "{}-row tile {:?} vs one row {:?}", $mr, &r[..8], o);
                            }
                            one
                        }};
                    }
                    let r = match (kind, bf) {
                        (Kind16::Odd, false) => rows!(6, |t, ap, bp, kn| tile16_oddz::<1, ODD_F16>(t, ap, BSrc::Packed(bp, 0), kn), |t, ap, bp, kn| tile16_oddz::<6, ODD_F16>(t, ap, BSrc::Packed(bp, 0), kn)),
                        (Kind16::OddFin, false) => {
                            rows!(6, |t, ap, bp, kn| tile16_oddz::<1, ODD_F16_FIN>(t, ap, BSrc::Packed(bp, 0), kn), |t, ap, bp, kn| tile16_oddz::<6, ODD_F16_FIN>(t, ap, BSrc::Packed(bp, 0), kn))
                        }
                        (Kind16::OddFin, true) => panic!("kind OddFin rounds into float16 only"),
                        (Kind16::Fma, false) => add16::<K_FMA, false>(c, av, bv, av),
                        (Kind16::Split, false) => add16::<K_SPLIT, false>(c, av, bv, _mm256_set1_ps(split_mult(11))),
                        (Kind16::Split, true) => add16::<K_SPLIT, true>(c, av, bv, _mm256_set1_ps(split_mult(8))),
                        (Kind16::Mid, false) => add16::<K_MID, false>(c, av, bv, av),
                        (Kind16::Odd, true) => rows!(4, |t, ap, bp, kn| tile16_unit::<1, true>(t, ap, BSrc::Packed(bp, 0), kn, 16), |t, ap, bp, kn| tile16_unit::<4, true>(t, ap, BSrc::Packed(bp, 0), kn, 16)),
                        (Kind16::Fma, true) => add16::<K_FMA, true>(c, av, bv, av),
                        (Kind16::Mid, true) => add16::<K_MID, true>(c, av, bv, av),
                        (Kind16::OddE5m2, _) => rows!(4, |t, ap, bp, kn| tile16_oddz::<1, ODD_E5M2>(t, ap, BSrc::Packed(bp, 0), kn), |t, ap, bp, kn| tile16_oddz::<4, ODD_E5M2>(t, ap, BSrc::Packed(bp, 0), kn)),
                        (Kind16::Dir(to), _) => one_row!(t, bp => tile16_dir_to::<1>(to, rm, &mut t, &[a], BSrc::Packed(&bp, 0), 1)),
                        (Kind16::UnitNe, _) => {
                            // On the values scaled as the tiles scale them (exact for fp8 products).
                            let sc = unit_scale(&sr_fmt(&Format::Float(named::FLOAT8_E5M2)).expect("e5m2"));
                            let (up, down) = (2f32.powi(sc), 2f32.powi(-sc));
                            let mut t = [0f32; 16];
                            t[..8].iter_mut().zip(acc).for_each(|(x, v)| *x = v * up);
                            let mut bp = [0f32; 16];
                            bp[..8].copy_from_slice(&b);
                            tile16_unit::<1, false>(&mut t, &[a * up], BSrc::Packed(&bp, 0), 1, 21);
                            _mm256_mul_ps(_mm256_loadu_ps(t.as_ptr()), _mm256_set1_ps(down))
                        }
                        (Kind16::OddUnit, _) => {
                            // Into float8_e5m2, on values scaled as the tiles scale them:
                            // a and b by halves of the scale (the caller keeps a*b*2^sc an f32).
                            let sc = unit_scale(&sr_fmt(&Format::Float(named::FLOAT8_E5M2)).expect("e5m2"));
                            let (h, down) = (2f32.powi(sc / 2), 2f32.powi(-sc));
                            let mut t = [0f32; 16];
                            t[..8].iter_mut().zip(acc).for_each(|(x, v)| *x = v * h * h);
                            let mut bp = [0f32; 16];
                            bp[..8].iter_mut().zip(b).for_each(|(x, v)| *x = v * h);
                            tile16_unit::<1, true>(&mut t, &[a * h], BSrc::Packed(&bp, 0), 1, 21);
                            _mm256_mul_ps(_mm256_loadu_ps(t.as_ptr()), _mm256_set1_ps(down))
                        }
                        (Kind16::Sr, _) => panic!("the stochastic kernel draws bits per element: it is checked through matmul_emulated"),
                    };
                    _mm256_storeu_ps(out.as_mut_ptr(), r);
                }
                out
            }
            if crate::convert::detected_isa() >= crate::convert::Isa::Avx2 {
                // SAFETY: avx2, fma and f16c were detected.
                return Some(unsafe { go(kind, bf, f16_rounding(mode), acc, a, b) });
            }
        }
        let _ = (kind, bf, mode, acc, a, b);
        None
    }

    /// The scale of the [`DirTo::Unit`] kernel into `fmt` ([`unit_scale`]), split
    /// in two halves (the tiles scale A's values by the whole of it; the product
    /// inside the FMA is the same).
    pub fn unit_scales(fmt: crate::format::FloatFormat) -> (i32, i32) {
        let sc = unit_scale(&sr_fmt(&Format::Float(fmt)).expect("a format of the Unit kernel"));
        (sc / 2, sc - sc / 2)
    }

    /// The directed kernel at the unit of `fmt` ([`DirTo::Unit`], on values scaled
    /// by [`unit_scale`] as the tiles run it) on 8 lanes, `acc + a*b` rounded in
    /// `mode`; `a` and `b` are scaled by the halves of [`unit_scales`], which must
    /// be exact. `None` without avx2/fma/f16c.
    pub fn unit_lanes(fmt: crate::format::FloatFormat, mode: Mode, acc: [f32; 8], a: f32, b: [f32; 8]) -> Option<[f32; 8]> {
        let f = sr_fmt(&Format::Float(fmt)).expect("a format of the Unit kernel");
        let (sa, sb) = unit_scales(fmt);
        let sc = |x: f32, s: i32| {
            let y = x * 2f32.powi(s);
            assert!(y * 2f32.powi(-s) == x || x.is_nan(), "{x:e} scaled by 2^{s} is inexact");
            y
        };
        let mut t = [0f32; 16];
        t[..8].iter_mut().zip(acc).for_each(|(x, v)| *x = sc(v, sa + sb));
        let mut bp = [0f32; 16];
        bp[..8].iter_mut().zip(b).for_each(|(x, v)| *x = sc(v, sb));
        let a2 = sc(a, sa);
        #[cfg(target_arch = "x86_64")]
        if crate::convert::detected_isa() >= crate::convert::Isa::Avx2 {
            // SAFETY: avx2, fma and f16c were detected; a one-row tile of 16 lanes.
            unsafe { tile16_dir_to::<1>(DirTo::Unit(f.unit as u8), f16_rounding(mode), &mut t, &[a2], BSrc::Packed(&bp, 0), 1) };
            return Some(std::array::from_fn(|l| t[l] * 2f32.powi(-sa - sb)));
        }
        let _ = (t, bp, a2, f);
        None
    }

    /// `round(acc + p)` of the exact sum into float16 (`bf`: bfloat16) in `mode`, by the f64 path.
    pub fn exact16(bf: bool, mode: Mode) -> impl Fn(f64, f64) -> f64 {
        exact_in(if bf { named::BFLOAT16 } else { named::FLOAT16 }, mode)
    }

    /// `round(acc + p)` of the exact sum into `fmt` in `mode`, by the f64 path.
    pub fn exact_in(fmt: crate::format::FloatFormat, mode: Mode) -> impl Fn(f64, f64) -> f64 {
        let f = Dyn::new(Format::Float(fmt), RoundOpts::new(mode)).unwrap();
        move |acc, p| f.add(acc, p, 0)
    }

    /// A stochastic depth step through the vector kernel (`None` when it does not
    /// apply) and element by element through `Fast::add`, element j's bits
    /// those of element (base, j) at step 0 of a [`StepRand`] of `stride` steps.
    #[allow(clippy::type_complexity)]
    pub fn st_step_both(fmt: Format, rbits: u32, row: &[f64], bp: &[f64], av: f64, base: u64, stride: u64, exact: bool) -> Option<(Vec<f64>, Vec<f64>)> {
        let mut opts = RoundOpts::new(Mode::Stochastic);
        opts.rbits = rbits;
        opts.key = crate::round::SeedKey::from_seed(99);
        let f = Fast::<M_ST>::new(fmt, opts);
        let sr = StepRand::new(opts.key, stride.max(1));
        let (u, vw): (u64, Vec<u64>) = (sr.row(base as usize, 0, rbits), (0..row.len()).map(|j| sr.col(j, 0, rbits)).collect());
        let mut v = row.to_vec();
        if !f.step_st(crate::convert::detected_isa() >= crate::convert::Isa::Avx2, &mut v, bp, av, u, &vw, rbits, exact) {
            return None;
        }
        let w = (0..row.len()).map(|j| f.add(row[j], av * bp[j], sr.bits(base as usize, j, 0, rbits))).collect();
        Some((v, w))
    }

    /// The register tile in `mode` on `nr` rows x 8 columns over `kn` steps
    /// (`None` when it does not apply or declines the tile), and the same steps
    /// element by element through `Fast::add` (with `Rng::bits` when
    /// stochastic): element (r, l) draws the bits of element (e0s[r], l) at
    /// step t0 + kk of a [`StepRand`] of `steps` steps.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    /// When [`Fast::quiet_ok`] holds for the tile's values (A and B values of
    /// `prec` bits), the tile without watching runs too, and must give the same
    /// bits; the third result says whether it ran.
    pub fn tile_both(fmt: Format, mode: Mode, rbits: u32, nr: usize, acc: &[f64], ap: &[f64], bp: &[f64], kn: usize, e0s: [u64; TILE_ROWS], steps: u64, t0: u64, exact: bool, prec: i32) -> Option<(Vec<f64>, Vec<f64>, bool)> {
        let mut opts = RoundOpts::new(mode);
        opts.rbits = rbits;
        opts.key = crate::round::SeedKey::from_seed(7);
        let sr = StepRand::new(opts.key, steps);
        let Format::Float(ff) = fmt else { return None };
        let d = 52 - ff.man_bits;
        let rows: Vec<u64> = (0..kn * TILE_ROWS).map(|q| Words::place_row(sr.row(e0s[q % TILE_ROWS] as usize, t0 as usize + q / TILE_ROWS, rbits), rbits, d)).collect();
        let cols: Vec<u64> = (0..kn * 8).map(|q| Words::place_col(sr.col(q % 8, t0 as usize + q / 8, rbits), rbits, d)).collect();
        let words = Words { rows: &rows, cols: &cols, ldv: 8 };
        let simd = crate::convert::detected_isa() >= crate::convert::Isa::Avx2;
        by_mode!(mode_code(mode), C => {
                let f = Fast::<C>::new(fmt, opts);
                let mut want = acc.to_vec();
                for r in 0..nr {
                    for l in 0..8 {
                        for kk in 0..kn {
                            let rd = if C == M_ST { sr.bits(e0s[r] as usize, l, t0 as usize + kk, rbits) } else { 0 };
                            want[r * 8 + l] = f.add(want[r * 8 + l], ap[kk * TILE_ROWS + r] * bp[kk * 8 + l], rd);
                        }
                    }
                }
                let same = |x: &[f64]| x.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
                let quiet = f.quiet_ok(exp_bounds64(&ap[..kn * TILE_ROWS], prec), exp_bounds64(&bp[..kn * 8], prec), abs_max(&acc[..nr * 8]), kn);
                let mut free = acc.to_vec();
                let quiet = quiet && f.tile_run(simd, nr, &mut free, 8, ap, bp, 8, kn, words, rbits, exact, false);
                if quiet {
                    assert!(same(&free), "{fmt:?} {mode:?}: the tile without watching differs from the scalar path: {free:?} vs {want:?}");
                }
                // The stochastic tile toward zero, where A's values scale exactly.
                let (ba, bb) = (exp_bounds64(&ap[..kn * TILE_ROWS], prec), exp_bounds64(&bp[..kn * 8], prec));
                if let Some(sc) = f.sr_scale(rbits).filter(|&sc| ba.0.is_none_or(|(lo, _)| lo + sc >= -1074)) {
                    let aps: Vec<f64> = ap.iter().map(|&x| x * 2f64.powi(sc)).collect();
                    let mut sro = acc.to_vec();
                    if f.tile_sr_run(simd, nr, &mut sro, 8, &aps, bp, 8, kn, words, rbits, ba, bb) {
                        assert!(same(&sro), "{fmt:?} rbits {rbits}: the stochastic tile toward zero differs from the scalar path: {sro:?} vs {want:?}");
                        SR_TILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                let mut got = acc.to_vec();
                if !f.tile_run(simd, nr, &mut got, 8, ap, bp, 8, kn, words, rbits, exact, true) {
                    // The watching tile declined (a subnormal sum, say): the unwatched result stands in.
                    return quiet.then_some((free, want, true));
                }
                Some((got, want, quiet))
        })
    }

    /// Rows of the register tile.
    pub(crate) use super::TILE_ROWS;

    /// How many times [`tile_both`] ran the stochastic tile toward zero.
    pub static SR_TILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    /// [`matmul_emulated`] without [`run`]'s transposition of a matrix-vector product.
    pub fn matmul_as_given(a: &Operand, b: &Operand, c: OutMat<f64>, spec: &AccumSpec) -> Result<()> {
        run_as(a, b, EmuOut::F64(c), spec, false)
    }

    /// The emulated matmul through the f64 lanes only (no f32 tile kernels).
    pub fn matmul_f64_lanes(a: &Operand, b: &Operand, c: OutMat<f64>, spec: &AccumSpec) -> Result<()> {
        let c = EmuOut::F64(c);
        let outer = chunk_rounder(spec)?;
        assert!(fast_ok(&spec.fmt));
        by_mode!(mode_code(spec.opts.mode), C => drive(&Fast::<C>::new(spec.fmt, spec.opts), a, b, c, spec, outer.as_ref(), false))
    }

    /// Does [`Fast::exact_ok`] hold for accumulators `acc`, A values `ap` and B
    /// values `bp` (of `prec` bits) over `kn` steps? And, whether or not, does
    /// every sum of the steps `acc[l] = round(acc[l] + ap[kk] * bp[kk*w + l])`
    /// (w = acc.len()), rounded in `mode`, turn out exact in f64?
    pub fn exact_claim(fmt: Format, mode: Mode, acc: &[f64], ap: &[f64], bp: &[f64], kn: usize, prec: i32) -> (bool, bool) {
        let opts = RoundOpts::new(mode);
        by_mode!(mode_code(mode), C => {
            let f = Fast::<C>::new(fmt, opts);
            let claim = f.exact_ok(exp_bounds64(acc, f.man as i32 + 1), abs_max(acc), exp_bounds64(&ap[..kn], prec), exp_bounds64(&bp[..kn * acc.len()], prec), kn);
            let mut all = true;
            for (l, &a0) in acc.iter().enumerate() {
                let mut x = a0;
                for kk in 0..kn {
                    let p = ap[kk] * bp[kk * acc.len() + l];
                    all &= two_sum(x, p).1 == 0.0 && p.is_finite();
                    x = f.add(x, p, 0);
                }
            }
            (claim, all)
        })
    }

    /// Round `x` (standing for an exact value) with the fast routine (and its
    /// branch-free twin, which must agree unless it flags the lane), for tests.
    pub fn fast_round(fmt: Format, opts: RoundOpts, x: f64, rand: u64) -> Option<f64> {
        if !fast_ok(&fmt) {
            return None;
        }
        Some(by_mode!(mode_code(opts.mode), C => {
            let f = Fast::<C>::new(fmt, opts);
            let v = f.round(x, rand);
            let (w, bad) = f.round_nobranch(x, rand);
            assert!(bad || w.to_bits() == v.to_bits() || (w == 0.0 && v == 0.0), "nobranch {x:e}: {w:e} vs {v:e}");
            v
        }))
    }
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    /// A 64-bit LCG's top 53 bits, step by step from `s`.
    fn lcg(mut s: u64) -> impl FnMut() -> u64 {
        move || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            s >> 11
        }
    }

    /// [`tails_harmless`] never calls harmless a product the search of every
    /// pair of significands finds harmful, and refuses only those (or where its
    /// own search would be long).
    #[test]
    fn tails_harmless_matches_a_search_of_the_products() {
        // Every product N 2^e (N odd, a product of odd integers below 2^pa and
        // 2^pb) with a bit below 2^-149 that lies within 2^-149 of a nonzero
        // multiple of 2^(unit - 1), off it: the harmful ones.
        let harmful = |pa: i32, pb: i32, unit: i32| {
            (1..1u64 << pa).step_by(2).any(|x| {
                (1..1u64 << pb).step_by(2).any(|y| {
                    let n = (x * y) as u128;
                    // p = n 2^e, e from -150 down while p can reach 2^(unit - 1) - 2^-149.
                    (150..150 + (pa + pb) as u32 + 2).any(|ne| {
                        // In units of 2^-ne: half the unit, and 2^-149.
                        let (h, w) = (1u128 << (ne as i32 + unit - 1), 1u128 << (ne - 149));
                        let r = n % h;
                        (r > 0 && r < w && n > r) || (h - r < w && r > 0)
                    })
                })
            })
        };
        for (pa, pb) in [(8, 8), (11, 8), (8, 11), (11, 11), (11, 12), (12, 11), (9, 10), (4, 11)] {
            for unit in [-128, -129, -130, -131, -134, -136] {
                let fast = tails_harmless(pa, pb, unit);
                // (`false` may also mean the search was too long: never past its
                // verdict the other way.)
                assert!(!fast || !harmful(pa, pb, unit), "{pa} {pb} {unit}");
                if !fast {
                    let p = pa + pb;
                    let sh = unit + 148;
                    let long = p > sh && (1u64..=1 << (p - 1 - sh)).map(|j| (1u64 << (p - 1 - sh)) / j).sum::<u64>() > 1 << 14;
                    assert!(long || harmful(pa, pb, unit), "{pa} {pb} {unit}");
                }
            }
        }
        // float16 products into float8_e5m2 meet none; with a 12-bit factor (posit16), 2047 * 2049.
        assert!(tails_harmless(11, 11, -128) && !harmful(11, 11, -128));
        assert!(!tails_harmless(11, 12, -128) && harmful(11, 12, -128));
        // bfloat16 products: none reach a midpoint.
        assert!(tails_harmless(8, 8, -128));
    }

    /// [`code_scan`] on bfloat16, float16, float8_e5m2 and float8_e4m3fn codes
    /// equals [`mag_scan`] of their values, whatever the codes (every code, and
    /// rows of random ones with and without specials), rows forward and reversed.
    #[test]
    fn code_scan_matches_the_scan_of_the_values() {
        let _settings = crate::settings_read();
        let mut g = lcg(0x2545_f491_4f6c_dd1d);
        let mut next = move || (g() >> 22) as u32;
        let (rows, cols) = (37, 23);
        // (The largest pattern: a NaN's may differ where the decode quiets it; both must be NaN.)
        let same = |x: u32, y: u32| x == y || f32::from_bits(x).is_nan() && f32::from_bits(y).is_nan();
        for case in 0..60 {
            // Every code first, then random codes; every third case without the specials.
            let raw: Vec<u32> = (0..rows * cols).map(|x| if case == 0 { x as u32 } else { next() }).collect();
            let finite = case % 3 == 2;
            // bfloat16 and float16.
            for f16 in [false, true] {
                let inf: u16 = if f16 { 0x7c00 } else { 0x7f80 };
                let codes: Vec<u16> = raw.iter().map(|&r| if finite && (r as u16 & 0x7fff) >= inf { r as u16 & 0x3fff } else { r as u16 }).collect();
                let val = |c: u16| if f16 { super::super::f16_to_f32(c) } else { f32::from_bits((c as u32) << 16) };
                let want = mag_scan(&codes.iter().map(|&c| val(c)).collect::<Vec<_>>());
                for rev in [false, true] {
                    let (p, ld) = if rev { (codes.as_ptr().wrapping_add((rows - 1) * cols), -(cols as isize)) } else { (codes.as_ptr(), cols as isize) };
                    // SAFETY: rows x cols codes from p, ld apart, inside `codes`.
                    let got = unsafe { code_scan(p, ld, rows, cols, inf, |c| val(c as u16).to_bits()) };
                    assert!(got.0 == want.0 && got.1 == want.1 && same(got.2, want.2), "case {case} f16 {f16} rev {rev}: {got:x?} vs {want:x?}");
                }
            }
            for fmt in [named::FLOAT8_E5M2, named::FLOAT8_E4M3FN] {
                let inf: u8 = if fmt == named::FLOAT8_E5M2 { 0x7c } else { 0x7f };
                let table: Vec<f32> = (0..256u64).map(|c| fmt.decode(c) as f32).collect();
                let codes: Vec<u8> = raw.iter().map(|&r| if finite && (r as u8 & 0x7f) >= inf { r as u8 & 0x3f } else { r as u8 }).collect();
                let want = mag_scan(&codes.iter().map(|&c| table[c as usize]).collect::<Vec<_>>());
                // SAFETY: rows x cols codes, inside `codes`.
                let got = unsafe { code_scan(codes.as_ptr(), cols as isize, rows, cols, inf, |c| table[c as usize].to_bits()) };
                assert!(got.0 == want.0 && got.1 == want.1 && same(got.2, want.2), "case {case} {fmt:?}: {got:x?} vs {want:x?}");
            }
        }
    }

    /// The bounds of a block scanned 4 values at a time ([`mag_range_avx2`])
    /// equal the scalar scan's, for every length up to 70 (the 4-value steps
    /// and the tail), with zeros, subnormals, infinities and NaNs placed anywhere.
    #[test]
    fn vector_bounds_match_the_scalar_scan() {
        let _settings = crate::settings_read();
        let mut next = lcg(0x9e37_79b9_7f4a_7c15);
        let specials = [0.0, -0.0, 5e-324, -2.2e-308, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e300, -3.0];
        for len in 0..=70 {
            for case in 0..40 {
                let v: Vec<f64> = (0..len)
                    .map(|_| {
                        let r = next();
                        if case % 4 == 0 && r.is_multiple_of(7) {
                            specials[(r / 7) as usize % specials.len()]
                        } else if case % 4 == 1 {
                            0.0
                        } else {
                            ((r % 1000) as f64 - 500.0) * 2f64.powi((r >> 20) as i32 % 200 - 100)
                        }
                    })
                    .collect();
                for prec in [8, 24] {
                    assert_eq!(exp_bounds64_of(&v, prec), exp_bounds64(&v, prec), "len {len} case {case}: {v:?}");
                }
            }
        }
    }

    #[test]
    fn pow2_is_the_power() {
        for e in -1200..1200 {
            // powi is exact down to 2^-1022; below, 2^-1022 halved exactly (a subnormal, then 0).
            let want = if e >= -1022 { 2f64.powi(e) } else { (0..-1022 - e).fold(2f64.powi(-1022), |x, _| x / 2.0) };
            assert_eq!(pow2(e).to_bits(), want.to_bits(), "2^{e}");
        }
    }

    /// [`sr_states`]' progression equals each lane's own state, and it refuses
    /// exactly where a lane's index changes its upper word over the steps.
    #[test]
    fn weyl_states_of_a_row() {
        let rng = Rng::new(crate::round::SeedKey::from_seed(5));
        for (idx0, stride, len) in [(0u64, 1u64, 1usize), (1000, 520, 9), ((1u64 << 32) - 20000, 1300, 5), ((1u64 << 32) - 4, 1, 2), ((7u64 << 32) + 5, 77, 100), (u64::MAX - 30, 1, 1), (u64::MAX - 2, 1, 1)] {
            let lanes: Vec<u64> = (0..16).map(|l| idx0.wrapping_add(l * stride)).collect();
            let fits = lanes.iter().all(|&i| i >> 32 == i.wrapping_add(len as u64 - 1) >> 32);
            let got = sr_states(&rng, idx0, stride, len);
            assert_eq!(got.is_some(), fits, "idx0 {idx0} stride {stride} len {len}");
            if let Some(v) = got {
                for (l, &i) in lanes.iter().enumerate() {
                    assert_eq!(v[l], rng.weyl0(i as u32, rng.hi_word(i)), "idx0 {idx0} lane {l}");
                }
            }
        }
    }

    /// [`tile16_sr`] reports an inexact FMA (MXCSR's precision flag), and
    /// only then: the sums' last bits within 24 bits of their first, or not.
    #[test]
    fn float32_tiles_report_inexact_sums() {
        if !crate::gemm::simd() {
            return;
        }
        let run = |acc0: f32, a: f32, b: f32| {
            let mut acc = [acc0; 16];
            let (ap, bp, up, vp) = ([a; 2], [b; 32], [0u32; 2], [0u32; 32]);
            // SAFETY: avx2 and fma detected (simd); acc 16 values, ap and up 2, bp and vp 32.
            let plain = unsafe { tile16_sr::<1, SR_PLAIN>(&mut acc.clone(), &ap, &bp, &up, &vp, 2, 13, 1.0).1 };
            let watched = unsafe { tile16_sr::<1, SR_TRACK>(&mut acc, &ap, &bp, &up, &vp, 2, 13, 1.0).1 };
            assert_eq!(plain, watched);
            plain
        };
        assert!(!run(1024.0, 1.0, 0.5));
        assert!(!run(1024.0, 0.5, 2f32.powi(-4) + 2f32.powi(-12)));
        assert!(run(1024.0, 1.0, 2f32.powi(-4) + 2f32.powi(-14)));
        assert!(run(2f32.powi(-24), 3.0, 1024.0));
        assert!(!run(0.0, 2f32.powi(-9), 2f32.powi(-9)));
    }

    /// [`Fast::tile_sr_run`] into float32 with 32 random bits (more than the
    /// f64 sum keeps below its unit): an exact sum decides with the top 29
    /// bits as all 32 do; an inexact one whose top 29 tie and whose last 3
    /// decide voids the tile (the top 29 alone would round it down).
    #[test]
    fn checked_f64_tiles_refuse_inexact_sums() {
        if !crate::gemm::simd() {
            return;
        }
        let f = Format::Float(named::FLOAT32);
        let o = Dyn::new(f, RoundOpts { rbits: 32, ..RoundOpts::new(Mode::Stochastic) }).expect("fast");
        let Dyn::Fast(fast, _) = &o else { panic!("float32 is a fast format") };
        let fast = fast.as_mode::<M_ST>();
        let (s, checked) = fast.sr_checked(32).expect("stochastic");
        assert!(checked && fast.sr_checked(28).is_some_and(|x| !x.1));
        let d = 52 - fast.man;
        // The remainder below 1.0's unit (2^-23) is half a unit plus 2^-31 units.
        let rand = (1u64 << 31) + 1;
        for (p, exact) in [(2f64.powi(-24) + 2f64.powi(-54), false), (2f64.powi(-24) + 2f64.powi(-50), true)] {
            let mut acc = [1.0f64; 8];
            let aps = [pow2(s), 0.0, 0.0, 0.0];
            let bp = [p; 8];
            let cols = [Words::place_col(rand << 32, 32, d); 8];
            let words = Words { rows: &[0; 4], cols: &cols, ldv: 8 };
            let (ab, bb) = (exp_bounds64(&[1.0], 53), exp_bounds64(&bp, 53));
            let ran = fast.tile_sr_run(true, 1, &mut acc, 8, &aps, &bp, 8, 1, words, 32, ab, bb);
            let want = o.add(1.0, p, rand);
            assert_eq!(ran, exact, "p = {p:e}");
            if exact {
                assert!(acc.iter().all(|&x| x == want), "{acc:?} against {want}");
            } else {
                assert_eq!(acc, [1.0; 8], "a refusal writes nothing");
                // Rounded up with all 32 bits, where the top 29 alone tie and round down.
                assert_eq!(want, 1.0 + 2f64.powi(-23));
            }
        }
    }

    /// [`flush_sr`] with `ties`: a total plus a row whose f32 sum is inexact,
    /// with random words (found by search) whose top `unit` bits equal the
    /// remainder's, is kept and marked, and the lanes' redo with every bit
    /// gives [`Dyn::add`]'s sums, where the top bits alone give others.
    #[test]
    fn tied_chunk_totals_are_marked() {
        if !crate::gemm::simd() {
            return;
        }
        let rng = Rng::new(crate::round::SeedKey::from_seed(8));
        // (format, total, row): the sum's remainder below the unit has its top
        // `unit` bits F and a last bit below them (float16: F = 512 at 1024).
        let cases = [
            (named::FLOAT16, 1024.0f64, 2f64.powi(-4) + 2f64.powi(-14)),
            (named::BFLOAT16, 128.0, 2f64.powi(-10) + 2f64.powi(-17)),
            (named::FLOAT8_E5M2, 32768.0, 2f64.powi(-8) + 2f64.powi(-10)),
        ];
        for (fmt, tot, row) in cases {
            let f = Format::Float(fmt);
            let sf = sr_fmt(&f).expect("an sr format");
            let unit = sf.unit;
            let all = Dyn::new(f, RoundOpts { rbits: 32, ..RoundOpts::new(Mode::Stochastic) }).expect("fast");
            let top = Dyn::new(f, RoundOpts { rbits: unit, ..RoundOpts::new(Mode::Stochastic) }).expect("fast");
            // F: the remainder's top bits, in units of 2^-unit of the total's unit.
            let ulp = pow2(value_bounds(&f).0.max(tot.log2().floor() as i32 - (sf.prec - 1)));
            let frac = row.abs() / ulp;
            let tie = (frac * pow2(unit as i32)).floor() as u64;
            assert!(frac < 1.0 && tie > 0 && (tot + row) as f32 as f64 != tot + row, "{fmt:?}: an inexact f32 sum");
            // 8 indices whose words tie, then 8 others.
            let mut idx: Vec<u64> = (0..1u64 << 26).filter(|&i| rng.bits(i, 32) >> (32 - unit) == tie).take(8).collect();
            assert_eq!(idx.len(), 8);
            idx.extend(1000..1008u64);
            let states: Vec<u32> = idx.iter().map(|&i| rng.weyl0(i as u32, rng.hi_word(i))).collect();
            let (mut t, mut r) = (vec![tot as f32; 16], vec![row as f32; 16]);
            let mut marks = [0u8; 2];
            // SAFETY: avx2 detected (simd); 16 lanes, a mark for every 8.
            let kept = unsafe { flush_sr(&mut t, &mut r, &states, rng.gamma(), unit, unit, true, &mut marks) };
            assert!(kept && marks[0] == 0xff && marks[1] == 0, "{fmt:?}: marks {marks:?}");
            let mut differ = 0;
            for (l, &i) in idx.iter().enumerate() {
                let want = all.add(tot, row, rng.bits(i, 32));
                if marks[l / 8] >> (l % 8) & 1 != 0 {
                    assert_eq!((t[l], r[l]), (tot as f32, row as f32), "{fmt:?}: a kept lane");
                    t[l] = all.add(t[l] as f64, r[l] as f64, rng.bits(i, 32)) as f32;
                    differ += usize::from(top.add(tot, row, rng.bits(i, unit)) != want);
                } else {
                    assert_eq!(r[l], 0.0);
                }
                assert_eq!(t[l] as f64, want, "{fmt:?} lane {l}");
            }
            assert!(differ > 0, "{fmt:?}: the bits below the top decide some tied lane");
        }
    }

    /// [`flush64_sr`] against [`Dyn::add`] lane by lane, through
    /// [`Dyn::flush_sr_row`]: totals and sums of several magnitudes (the
    /// totals' subnormal range too), rows of 4 to 128 lanes with a tail, and
    /// rows that must refuse (past the largest value, an inf).
    #[test]
    fn vector_chunk_totals_match_the_scalar_add() {
        if !crate::gemm::simd() {
            return;
        }
        let rng = Rng::new(crate::round::SeedKey::from_seed(21));
        let (steps, t0) = (1000u64, 777u64);
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut ran, mut refused) = (0, 0);
        for fmt in [named::FLOAT16, named::BFLOAT16, named::FLOAT8_E5M2] {
            let f = Format::Float(fmt);
            for rbits in [1u32, 9, 13, 32] {
                let opts = RoundOpts { rbits, ..RoundOpts::new(Mode::Stochastic) };
                let o = Dyn::new(f, opts).expect("fast format");
                for (n, scale) in [(4usize, 1.0f64), (7, 1e-6), (37, 2e-5), (128, 3.0), (130, 1.0), (64, 6e4)] {
                    let draw = |x: u64| {
                        let v = ((x >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * scale;
                        f.decode(f.encode(v, &RoundOpts::new(Mode::NearestEven), 0))
                    };
                    let tot: Vec<f64> = (0..n).map(|_| draw(next())).collect();
                    let row: Vec<f64> = (0..n).map(|_| draw(next())).collect();
                    let mut got = tot.clone();
                    let e0 = next() % 100_000;
                    if !o.flush_sr_row(true, &mut got, &row, &rng, e0, steps, t0, rbits, true) {
                        assert!(n > JB || scale > 1e4, "refused n {n} scale {scale}");
                        assert_eq!(got, tot, "a refusal writes nothing");
                        refused += 1;
                        continue;
                    }
                    ran += 1;
                    for j in 0..n {
                        let rd = rng.bits((e0 + j as u64).wrapping_mul(steps).wrapping_add(t0), rbits);
                        let want = o.add(tot[j], row[j], rd);
                        assert_eq!(got[j].to_bits(), want.to_bits(), "{fmt:?} rbits {rbits} n {n} lane {j}: {} + {}", tot[j], row[j]);
                    }
                }
                // An inf among the totals refuses.
                let mut t = vec![1.0; 8];
                t[5] = f64::INFINITY;
                assert!(!o.flush_sr_row(true, &mut t, &[0.5; 8], &rng, 0, steps, t0, rbits, true));
            }
        }
        assert!(ran > 40 && refused > 0, "ran {ran} refused {refused}");
    }
}
