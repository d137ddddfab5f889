//! float32 operands whose values all belong to a narrower format, as codes of
//! that format.
//!
//! Precision experiments often keep low-precision values in float32 arrays
//! (rounded to bf16, fp16 or fp8, stored as float32). The emulated
//! accumulation kernels choose their computation from the bits of the
//! products, which they read off the operands' formats: float32 x float32
//! products have up to 48 bits and leave only the float64 lanes, while the same
//! values as fp16 codes (22-bit products) or fp8 codes (at most 8) take the
//! float32 tiles, several times faster. [`narrowed`] finds the narrowest of a
//! few formats that holds every value of a float32 operand exactly, from one
//! scan of its bits, and encodes the values into it; the codes are checked to
//! decode to the very same float32 bits, so the product reads the same values.

use super::{Operand, Storage};
use crate::convert;
use crate::format::{named, FloatFormat, Format};
use crate::round::{Mode, RoundOpts};

/// The formats tried, fewest significand bits first.
const CANDIDATES: [FloatFormat; 4] = [named::FLOAT8_E5M2, named::FLOAT8_E4M3FN, named::BFLOAT16, named::FLOAT16];

/// What one scan of a float32 operand's values finds: the most significand bits
/// of any value, the lowest exponent of any value's last set bit, the largest
/// magnitude (as an f32 pattern) and whether some value is infinite. `None`
/// from [`scan`]: a NaN, which no candidate is tried for.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bits {
    sig: u32,
    lsb: i32,
    max: u32,
    inf: bool,
}

impl Bits {
    /// Does `f` hold every value scanned (by bits, range and last bit)?
    fn fit(&self, f: &FloatFormat) -> bool {
        let lsb_min = f.emin() - f.man_bits as i32;
        self.sig <= f.man_bits + 1 && self.lsb >= lsb_min && f64::from(f32::from_bits(self.max)) <= f.max_value() && (!self.inf || f.inf)
    }
}

/// The running state of a scan, in branch-free form (the loop vectorizes):
/// largest significand width, smallest biased exponent of a last set bit,
/// largest finite magnitude pattern, infinities seen, NaNs seen.
#[derive(Clone, Copy)]
struct Scan {
    sig: u32,
    lsb: u32,
    max: u32,
    inf: u32,
    bad: u32,
}

impl Scan {
    #[inline(always)]
    fn add(&mut self, x: f32) {
        let u = x.to_bits() & 0x7fff_ffff;
        let e = u >> 23;
        let v = (u & 0x7f_ffff) | 0x80_0000;
        // The lowest set bit of the significand (implicit bit included), as a
        // power of two up to 2^23, whose log2 an exact i32 -> f32 conversion reads.
        let low = v & v.wrapping_neg();
        let l2 = ((low as i32 as f32).to_bits() >> 23) - 127;
        // All-ones where the value is nonzero and finite, and where it is also
        // normal (masks, not branches). An f32 subnormal's last set bit is
        // 2^(l2 - 149); its width does not matter, as it lies below every
        // candidate's smallest normal, where only the last bit does.
        let finite = 0u32.wrapping_sub((e != 255) as u32);
        let plain = finite & 0u32.wrapping_sub((u != 0) as u32);
        let normal = plain & 0u32.wrapping_sub((e != 0) as u32);
        self.sig = self.sig.max((24 - l2) & normal);
        self.lsb = self.lsb.min((e.max(1) + l2) | !plain);
        self.max = self.max.max(u & finite);
        self.inf |= (u == 0x7f80_0000) as u32;
        self.bad |= (u > 0x7f80_0000) as u32;
    }

    fn bits(&self) -> Option<Bits> {
        // The last set bit: 2^(max(e, 1) - 150 + l2).
        (self.bad == 0).then(|| Bits { sig: self.sig, lsb: if self.lsb == u32::MAX { i32::MAX } else { self.lsb as i32 - 150 }, max: self.max, inf: self.inf != 0 })
    }
}

/// [`Scan::add`] over a contiguous run of values.
#[inline(always)]
fn scan_run(st: &mut Scan, xs: &[f32]) {
    for &x in xs {
        st.add(x);
    }
}

/// [`scan_run`] 8 values at a time, [`Scan::add`]'s steps on the lanes.
///
/// # Safety
/// The CPU must support avx2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scan_run_avx2(st: &mut Scan, xs: &[f32]) {
    use std::arch::x86_64::*;
    let c = |v: u32| _mm256_set1_epi32(v as i32);
    let ones = c(u32::MAX);
    let (mut sig, mut lsb, mut max) = (_mm256_setzero_si256(), ones, _mm256_setzero_si256());
    let (mut inf, mut bad) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    let chunks = xs.chunks_exact(8);
    let rest = chunks.remainder();
    for ch in chunks {
        // SAFETY: ch holds 8 values.
        let x = unsafe { _mm256_loadu_si256(ch.as_ptr() as *const __m256i) };
        let u = _mm256_and_si256(x, c(0x7fff_ffff));
        let e = _mm256_srli_epi32::<23>(u);
        let v = _mm256_or_si256(_mm256_and_si256(u, c(0x7f_ffff)), c(0x80_0000));
        let low = _mm256_and_si256(v, _mm256_sub_epi32(_mm256_setzero_si256(), v));
        let l2 = _mm256_sub_epi32(_mm256_srli_epi32::<23>(_mm256_castps_si256(_mm256_cvtepi32_ps(low))), c(127));
        let finite = _mm256_andnot_si256(_mm256_cmpeq_epi32(e, c(255)), ones);
        let nz = _mm256_andnot_si256(_mm256_cmpeq_epi32(u, _mm256_setzero_si256()), ones);
        let plain = _mm256_and_si256(finite, nz);
        let normal = _mm256_andnot_si256(_mm256_cmpeq_epi32(e, _mm256_setzero_si256()), plain);
        sig = _mm256_max_epu32(sig, _mm256_and_si256(_mm256_sub_epi32(c(24), l2), normal));
        let last = _mm256_add_epi32(_mm256_max_epu32(e, c(1)), l2);
        lsb = _mm256_min_epu32(lsb, _mm256_or_si256(last, _mm256_andnot_si256(plain, ones)));
        max = _mm256_max_epu32(max, _mm256_and_si256(u, finite));
        inf = _mm256_or_si256(inf, _mm256_cmpeq_epi32(u, c(0x7f80_0000)));
        bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(u, c(0x7f80_0000)));
    }
    let lanes = |v: __m256i| {
        let mut a = [0u32; 8];
        // SAFETY: a holds 8 lanes.
        unsafe { _mm256_storeu_si256(a.as_mut_ptr() as *mut __m256i, v) };
        a
    };
    st.sig = lanes(sig).into_iter().fold(st.sig, u32::max);
    st.lsb = lanes(lsb).into_iter().fold(st.lsb, u32::min);
    st.max = lanes(max).into_iter().fold(st.max, u32::max);
    st.inf |= lanes(inf).into_iter().fold(0, |a, b| a | b) & 1;
    st.bad |= lanes(bad).into_iter().fold(0, |a, b| a | b) & 1;
    scan_run(st, rest);
}

/// The scan of the values of `op` (float32 storage).
fn scan(op: &Operand) -> Option<Bits> {
    let mut st = Scan { sig: 0, lsb: u32::MAX, max: 0, inf: 0, bad: 0 };
    let p = op.ptr as *const f32;
    // Contiguous lines: rows (cs == 1) or columns (rs == 1).
    let (lines, len, ls, es) = if op.cs == 1 || op.rows == 1 { (op.rows, op.cols, op.rs, op.cs) } else { (op.cols, op.rows, op.cs, op.rs) };
    for l in 0..lines {
        // SAFETY: line l's elements lie inside the operand (from_raw's contract).
        unsafe {
            let first = p.offset(l as isize * ls);
            if es == 1 {
                let xs = std::slice::from_raw_parts(first, len);
                #[cfg(target_arch = "x86_64")]
                if super::simd() {
                    // (simd(): avx2 was detected.)
                    scan_run_avx2(&mut st, xs);
                    continue;
                }
                scan_run(&mut st, xs);
            } else {
                for q in 0..len {
                    st.add(*first.offset(q as isize * es));
                }
            }
        }
    }
    st.bits()
}

/// Codes of a narrowed operand, which its view points into (held, not read).
#[allow(dead_code)]
enum Codes {
    U8(Vec<u8>),
    U16(Vec<u16>),
}

/// A float32 operand's values as codes of a narrower format, and the view of
/// them (row-major) to compute with in the operand's place. The view reads
/// from `_codes`, which lives as long as it does.
pub(crate) struct Narrowed {
    _codes: Codes,
    pub op: Operand,
}

/// `op`'s values as codes of the narrowest candidate format that holds them
/// all exactly; `None` when `op` is not float32 storage, is empty, or no
/// candidate holds every value (a NaN, or more bits than float16's 11 in a
/// value, say).
pub(crate) fn narrowed(op: &Operand) -> Option<Narrowed> {
    if op.storage != Storage::F32 || op.rows == 0 || op.cols == 0 {
        return None;
    }
    // A zero stride repeats one row or column (a broadcast view): the codes hold
    // it once and the view repeats it the same way.
    let (m, k) = (if op.rs == 0 { 1 } else { op.rows }, if op.cs == 0 { 1 } else { op.cols });
    // SAFETY: the first m x k elements of the operand, the same pointer and strides.
    let distinct = unsafe { Operand::from_raw(op.ptr, Storage::F32, None, m, k, op.rs, op.cs, "a") }.ok()?;
    let bits = scan(&distinct)?;
    let f = *CANDIDATES.iter().find(|f| bits.fit(f))?;
    let fmt = Format::Float(f);
    let (codes, storage, ptr) = if f.bits() <= 8 {
        let mut c = zeroed::<u8>(m * k)?;
        encode_rows(&fmt, &distinct, &mut c)?;
        let ptr = c.as_ptr();
        (Codes::U8(c), Storage::U8, ptr)
    } else {
        let mut c = zeroed::<u16>(m * k)?;
        encode_rows(&fmt, &distinct, &mut c)?;
        let ptr = c.as_ptr() as *const u8;
        (Codes::U16(c), Storage::U16, ptr)
    };
    let (rs, cs) = (if op.rs == 0 { 0 } else { k as isize }, if op.cs == 0 { 0 } else { 1 });
    // SAFETY: the m x k row-major codes live in `codes`, which the result keeps
    // (a Vec's buffer does not move with the Vec) and nothing modifies; zero
    // strides stay on the one row or column stored.
    let view = unsafe { Operand::from_raw(ptr, storage, Some(fmt), op.rows, op.cols, rs, cs, "a") }.ok()?;
    Some(Narrowed { _codes: codes, op: view })
}

/// The values of `op` (float32 storage), row by row, as codes in `dst`
/// (rows * cols of them), checked by [`encode_checked`]; strided values pass
/// through a small buffer, a block at a time.
fn encode_rows<C: convert::Code>(fmt: &Format, op: &Operand, dst: &mut [C]) -> Option<()> {
    let (m, k) = (op.rows, op.cols);
    let p = op.ptr as *const f32;
    let opts = RoundOpts::new(Mode::NearestEven);
    if (m == 1 || op.rs == k as isize) && op.cs == 1 || k == 1 && op.rs == 1 {
        // SAFETY: these m*k elements are contiguous and inside the operand.
        let src = unsafe { std::slice::from_raw_parts(p, m * k) };
        return encode_checked(fmt, src, dst, &opts);
    }
    let mut buf = [0f32; 4096];
    for (b, out) in dst.chunks_mut(buf.len()).enumerate() {
        let start = b * buf.len();
        for (q, x) in buf[..out.len()].iter_mut().enumerate() {
            let (i, j) = ((start + q) / k, (start + q) % k);
            // SAFETY: (i, j) lies inside the operand.
            *x = unsafe { *p.offset(i as isize * op.rs + j as isize * op.cs) };
        }
        encode_checked(fmt, &buf[..out.len()], out, &opts)?;
    }
    Some(())
}

/// `len` zeros, or `None` where the memory is not to be had (the operand is
/// then used as it is: narrowing is an optimization, never a failure).
fn zeroed<T: Copy + Default>(len: usize) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    v.resize(len, T::default());
    Some(v)
}

/// Encode `src` into `dst` and check that every code decodes to the same f32
/// bits (`None` if one does not: then the operand is used as it is).
fn encode_checked<C: convert::Code>(fmt: &Format, src: &[f32], dst: &mut [C], opts: &RoundOpts) -> Option<()> {
    convert::encode(fmt, src, dst, opts, 0).ok()?;
    let mut back = [0f32; 1024];
    for (s, d) in src.chunks(back.len()).zip(dst.chunks(back.len())) {
        let back = &mut back[..s.len()];
        convert::decode(fmt, d, back).ok()?;
        // (A fold, not an early exit: it vectorizes.)
        if s.iter().zip(back.iter()).fold(0, |d, (x, y)| d | (x.to_bits() ^ y.to_bits())) != 0 {
            return None;
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(v: &[f32], rows: usize, cols: usize, rs: isize, cs: isize) -> Operand {
        // SAFETY: the tests' views lie inside `v`.
        unsafe { Operand::from_raw(v.as_ptr() as *const u8, Storage::F32, None, rows, cols, rs, cs, "a").unwrap() }
    }

    fn fmt_of(n: &Narrowed) -> Format {
        n.op.format().unwrap()
    }

    /// Each candidate is taken exactly when every value belongs to it, and the
    /// narrowed view reads the same values at every position and stride.
    #[test]
    fn narrowest_format_holding_every_value() {
        let cases: [(&[f32], Option<FloatFormat>); 15] = [
            (&[1.0, -1.5, 0.0, -0.0, 57344.0, 2f32.powi(-16)], Some(named::FLOAT8_E5M2)),
            (&[1.0, 1.125, 448.0, 2f32.powi(-9)], Some(named::FLOAT8_E4M3FN)),
            // 1.125 has 4 bits, but 2^-10 is below e4m3fn's smallest subnormal: bf16.
            (&[1.125, 2f32.powi(-10)], Some(named::BFLOAT16)),
            // Infinity: e4m3fn has none.
            (&[1.125, f32::INFINITY], Some(named::BFLOAT16)),
            (&[1.0, f32::NEG_INFINITY, 3.0], Some(named::FLOAT8_E5M2)),
            (&[1.0 + 2f32.powi(-7), 2f32.powi(100)], Some(named::BFLOAT16)),
            (&[1.0 + 2f32.powi(-10), 65504.0, 2f32.powi(-24)], Some(named::FLOAT16)),
            (&[1.0 + 2f32.powi(-10), 65536.0], None),
            (&[1.0 + 2f32.powi(-11)], None),
            (&[2f32.powi(-25)], Some(named::BFLOAT16)),
            (&[1.0, f32::NAN], None),
            (&[f32::from_bits(1)], None),
            (&[f32::from_bits(1 << 16), 1.5], Some(named::BFLOAT16)),
            (&[0.0, -0.0], Some(named::FLOAT8_E5M2)),
            // Four bits each, 480 beyond e4m3fn's 448.
            (&[1.125, 480.0], Some(named::BFLOAT16)),
        ];
        for (vals, want) in cases {
            let got = narrowed(&op(vals, 1, vals.len(), vals.len() as isize, 1));
            assert_eq!(got.as_ref().map(fmt_of), want.map(Format::Float), "{vals:?}");
            if let Some(n) = got {
                for (j, x) in vals.iter().enumerate() {
                    // SAFETY: (0, j) is inside the view.
                    let y = unsafe { n.op.get_f64(0, j) } as f32;
                    assert_eq!(x.to_bits(), y.to_bits(), "{vals:?}");
                }
            }
        }
        // Strided and transposed views: the values row by row.
        let v: Vec<f32> = (0..6000).map(|i| ((i % 60) as f32 - 30.0) * 0.25).collect();
        // Zero strides (broadcast rows, columns, or one value) stay zero: the
        // codes hold what is distinct once. Past 4096 values, the strided copy
        // runs in several blocks.
        let cases = [(5, 4, 12, 2, 0), (4, 5, 1, 12, 0), (6, 10, 10, 1, 0), (3, 4, -12, 1, 36), (7, 5, 0, 3, 2), (9, 6, 5, 0, 1), (300, 400, 0, 0, 59), (70, 60, 0, 1, 0), (5000, 2, 1, 0, 3), (4100, 3, 0, 0, 0), (3, 2000, 0, 0, 0), (1, 5000, 0, 0, 0), (100, 50, 1, 100, 0), (80, 60, 75, 1, 1)];
        for (rows, cols, rs, cs, base) in cases {
            // (With rs < 0, rows base, base - 12, base - 24 of v.)
            // SAFETY: every element of the view lies inside v.
            let o = unsafe { Operand::from_raw(v.as_ptr().add(base) as *const u8, Storage::F32, None, rows, cols, rs, cs, "a").unwrap() };
            // Quarters from -7.5 to 7.25 (up to 5 bits): e4m3fn or bfloat16.
            let n = narrowed(&o).expect("bfloat16 holds the quarters");
            for i in 0..rows {
                for j in 0..cols {
                    // SAFETY: in bounds.
                    unsafe { assert_eq!(o.get_f64(i, j), n.op.get_f64(i, j)) };
                }
            }
            assert_eq!((n.op.rs == 0, n.op.cs == 0), (rs == 0, cs == 0));
        }
        // Not float32 storage: left alone.
        let codes = [0u16; 4];
        // SAFETY: a view of the four codes.
        let b = unsafe { Operand::from_raw(codes.as_ptr() as *const u8, Storage::U16, Some(Format::Float(named::BFLOAT16)), 2, 2, 2, 1, "a").unwrap() };
        assert!(narrowed(&b).is_none());
    }

    /// The scan's verdict for each candidate is the round trip's: a set of
    /// values fits a format exactly when every value encodes into it and
    /// decodes to the same bits. Sets drawn from each candidate's codes, scaled
    /// by powers of two, with a bit added, with infinities, NaNs and f32
    /// subnormals; on the vector and the scalar scans (lengths past 8 and not).
    #[test]
    fn scan_agrees_with_the_round_trip() {
        let mut g = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            g ^= g << 13;
            g ^= g >> 7;
            g ^= g << 17;
            g
        };
        let opts = RoundOpts::new(Mode::NearestEven);
        let holds = |f: &FloatFormat, v: &[f32]| {
            v.iter().all(|&x| {
                let fmt = Format::Float(*f);
                let c = fmt.encode(x as f64, &opts, 0);
                !x.is_nan() && (fmt.decode(c) as f32).to_bits() == x.to_bits()
            })
        };
        let mut fits = [0usize; 4];
        for case in 0..4000 {
            let src = CANDIDATES[case % 4];
            let len = 1 + (next() % 40) as usize;
            let scale = 2f32.powi((next() % 9) as i32 - 4);
            let mut v: Vec<f32> = (0..len)
                .map(|_| {
                    let c = next() & ((1 << src.bits()) - 1);
                    let x = Format::Float(src).decode(c) as f32;
                    if x.is_nan() { 1.0 } else { x }
                })
                .collect();
            match next() % 8 {
                0 => v.iter_mut().for_each(|x| *x *= scale),
                1 => {
                    let i = (next() as usize) % len;
                    v[i] = f32::from_bits(v[i].to_bits() | 1 << (next() % 23));
                }
                2 => v[(next() as usize) % len] = f32::INFINITY,
                3 => v[(next() as usize) % len] = f32::NAN,
                4 => v[(next() as usize) % len] = f32::from_bits(1 + (next() % 1000) as u32),
                5 => v[(next() as usize) % len] = 2f32.powi(-((next() % 30) as i32)),
                _ => {}
            }
            let o = op(&v, 1, len, len as isize, 1);
            let bits = scan(&o);
            // The same scan by columns of a strided view (the scalar loop).
            let col = op(&v, len, 1, 1, len as isize);
            let col2 = scan(&col);
            assert_eq!(bits, col2, "{v:?}");
            for (q, f) in CANDIDATES.iter().enumerate() {
                let want = holds(f, &v);
                let got = bits.is_some_and(|b| b.fit(f));
                assert_eq!(got, want, "{f:?} {v:?} {bits:?}");
                fits[q] += got as usize;
            }
        }
        // Every candidate both taken and refused often.
        assert!(fits.iter().all(|&n| n > 300 && n < 3700), "{fits:?}");
    }
}
