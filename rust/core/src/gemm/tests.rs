use super::emulate::testing::fast_round;
use super::*;
use crate::convert::set_isa;
use crate::format::{named::*, FloatFormat, Format};
use crate::round::{Mode, RoundOpts, SeedKey};

/// A small deterministic generator for test data.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 11
    }
    fn unit(&mut self) -> f64 {
        (self.next() as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
}

fn op_f32(v: &[f32], rows: usize, cols: usize, rs: isize, cs: isize) -> Operand {
    // SAFETY: tests build views inside `v`.
    unsafe { Operand::from_raw(v.as_ptr() as *const u8, Storage::F32, None, rows, cols, rs, cs, "a").unwrap() }
}

fn naive(a: &Operand, b: &Operand) -> Vec<f64> {
    let mut c = vec![0.0; a.rows * b.cols];
    for i in 0..a.rows {
        for j in 0..b.cols {
            let mut s = 0.0;
            for p in 0..a.cols {
                // SAFETY: in bounds.
                s += unsafe { a.get_f64(i, p) * b.get_f64(p, j) };
            }
            c[i * b.cols + j] = s;
        }
    }
    c
}

fn check_f32(m: usize, n: usize, k: usize, transpose_a: bool) {
    let mut g = Lcg(m as u64 * 1000 + n as u64 * 10 + k as u64);
    let av: Vec<f32> = (0..m * k).map(|_| g.unit() as f32).collect();
    let bv: Vec<f32> = (0..k * n).map(|_| g.unit() as f32).collect();
    let a = if transpose_a { op_f32(&av, m, k, 1, m as isize) } else { op_f32(&av, m, k, k as isize, 1) };
    let b = op_f32(&bv, k, n, n as isize, 1);
    let want = naive(&a, &b);
    // C with a padded row stride, to catch writes outside the tile.
    let ldc = n + 3;
    let mut c = vec![f32::NAN; m * ldc];
    // SAFETY: c holds m rows of ldc.
    let out = unsafe { OutMat::from_raw(c.as_mut_ptr(), m, n, ldc as isize, 1) };
    matmul_f32(&a, &b, out).unwrap();
    for i in 0..m {
        for j in 0..n {
            let got = c[i * ldc + j] as f64;
            let tol = (k as f64 + 2.0) * f32::EPSILON as f64 * (k as f64).max(1.0);
            assert!((got - want[i * n + j]).abs() <= tol, "{m}x{n}x{k} ({i},{j}): {got} vs {}", want[i * n + j]);
        }
        for j in n..ldc {
            assert!(c[i * ldc + j].is_nan(), "wrote outside C");
        }
    }
}

#[test]
fn f32_shapes_both_paths() {
    for isa in [None, Some(crate::convert::Isa::Scalar)] {
        set_isa(isa).unwrap();
        for &(m, n, k) in &[(1, 1, 1), (5, 15, 7), (7, 17, 3), (6, 16, 256), (13, 33, 300), (64, 65, 257), (150, 20, 9)] {
            check_f32(m, n, k, false);
            check_f32(m, n, k, true);
        }
        check_f32(3, 4, 0, false);
    }
    set_isa(None).unwrap();
}

#[test]
fn int8_exact_extremes() {
    for isa in [None, Some(crate::convert::Isa::Scalar)] {
        set_isa(isa).unwrap();
        for &(m, n, k) in &[(7, 17, 513), (6, 16, 1), (1, 1, 1025)] {
            for fill in [-128i8, 127] {
                let av = vec![fill; m * k];
                let bv = vec![-128i8; k * n];
                // SAFETY: views inside the vectors.
                let a = unsafe { Operand::from_raw(av.as_ptr() as *const u8, Storage::I8, None, m, k, k as isize, 1, "a").unwrap() };
                let b = unsafe { Operand::from_raw(bv.as_ptr() as *const u8, Storage::I8, None, k, n, n as isize, 1, "b").unwrap() };
                let mut c = vec![0i32; m * n];
                // SAFETY: c holds m x n.
                let out = unsafe { OutMat::from_raw(c.as_mut_ptr(), m, n, n as isize, 1) };
                matmul_i8(&a, &b, out).unwrap();
                let want = fill as i64 * -128 * k as i64;
                assert!(c.iter().all(|&x| x as i64 == want), "{m}x{n}x{k} fill {fill}: {} vs {want}", c[0]);
            }
        }
    }
    set_isa(None).unwrap();
}

#[test]
fn padded_ld_rule() {
    assert_eq!(padded_ld(1024, 4).unwrap(), 1040);
    assert_eq!(padded_ld(1008, 4).unwrap(), 1008);
    assert_eq!(padded_ld(1000, 4).unwrap(), 1008);
    assert_eq!(padded_ld(2048, 2).unwrap(), 2080);
    assert_eq!(padded_ld(1, 8).unwrap(), 8);
    for n in 1..5000 {
        for s in [1, 2, 4, 8] {
            let ld = padded_ld(n, s).unwrap();
            assert!(ld >= n && (ld * s) % 64 == 0 && (ld * s) % 1024 != 0);
        }
    }
}

/// The fast accumulator rounding equals `Format::encode` for every mode.
#[test]
fn fast_round_matches_encode() {
    let fmts = [
        Format::Float(FLOAT16),
        Format::Float(BFLOAT16),
        Format::Float(FLOAT8_E5M2),
        Format::Float(FLOAT8_E4M3FN),
        Format::Float(FLOAT8_E4M3FNUZ),
        Format::Float(FLOAT32),
        Format::Float(FloatFormat::new(6, 9, None, true, crate::format::NanPolicy::Ieee, true).unwrap()),
    ];
    let mut g = Lcg(7);
    for f in fmts {
        let Format::Float(ff) = f else { unreachable!() };
        for mode in Mode::ALL {
            let mut opts = RoundOpts::new(mode);
            opts.rbits = 32;
            opts.key = SeedKey::from_seed(3);
            for t in 0..20000 {
                // Values across the whole range, including subnormals and overflow,
                // plus exact grid points and midpoints.
                let e = (g.next() % ((ff.emax() - ff.emin() + ff.man_bits as i32 + 6) as u64)) as i32 + ff.emin() - ff.man_bits as i32 - 3;
                let mut x = g.unit() * 2f64.powi(e);
                if t % 4 == 1 {
                    x = f.decode(f.encode(x, &RoundOpts::new(Mode::TowardZero), 0));
                } else if t % 4 == 2 {
                    let lo = f.decode(f.encode(x, &RoundOpts::new(Mode::TowardZero), 0));
                    let hi = f.decode(f.encode(x, &RoundOpts::new(Mode::Up), 0));
                    let hi2 = f.decode(f.encode(x, &RoundOpts::new(Mode::Down), 0));
                    x = if x > 0.0 { (lo + hi) / 2.0 } else { (lo + hi2) / 2.0 };
                }
                if !x.is_finite() {
                    continue;
                }
                let rand = g.next() >> 32;
                let want = f.decode(f.encode(x, &opts, rand));
                let got = fast_round(f, opts, x, rand).unwrap();
                assert!(got == want || (got.is_nan() && want.is_nan()), "{f:?} {mode:?} x={x:e}: {got:e} vs {want:e}");
            }
        }
    }
}

#[test]
fn emulated_fp16_is_sequential_rounding() {
    // k products of 1 into fp16: the sum stalls at 2048 with nearest-even.
    let k = 3000;
    let av = vec![1f32; k];
    let bv = vec![1f32; k];
    let a = op_f32(&av, 1, k, k as isize, 1);
    let b = op_f32(&bv, k, 1, 1, 1);
    let mut c = [0f64; 1];
    let spec = AccumSpec { fmt: Format::Float(FLOAT16), chunk: None, opts: RoundOpts::new(Mode::NearestEven) };
    // SAFETY: c holds 1 x 1.
    matmul_emulated(&a, &b, unsafe { OutMat::from_raw(c.as_mut_ptr(), 1, 1, 1, 1) }, &spec).unwrap();
    assert_eq!(c[0], 2048.0);
    let spec = AccumSpec { chunk: Some((64, Format::Float(FLOAT16))), ..spec };
    // SAFETY: as above.
    matmul_emulated(&a, &b, unsafe { OutMat::from_raw(c.as_mut_ptr(), 1, 1, 1, 1) }, &spec).unwrap();
    assert_eq!(c[0], 3000.0);
}

#[test]
#[ignore]
fn time_emulated() {
    let k = 4_000_000;
    let xv: Vec<f32> = (0..k).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let x = op_f32(&xv, k, 1, 1, 1);
    let mut c = [0f64; 1];
    for fmt in [Format::Float(FLOAT16), Format::Float(FLOAT32), Format::Posit(POSIT16)] {
        let spec = AccumSpec { fmt, chunk: None, opts: RoundOpts::new(Mode::NearestEven) };
        let t = std::time::Instant::now();
        // SAFETY: c holds 1 x 1.
        sum_emulated(&x, unsafe { OutMat::from_raw(c.as_mut_ptr(), 1, 1, 1, 1) }, &spec).unwrap();
        eprintln!("{fmt:?}: {:.2} ns/add", t.elapsed().as_nanos() as f64 / k as f64);
    }
}

#[test]
fn f16_conversion_every_code() {
    for c in 0..=u16::MAX {
        let want = FLOAT16.decode(c as u64);
        let got = f16_to_f32(c) as f64;
        assert!(got == want || (got.is_nan() && want.is_nan()), "{c:#x}");
        if !want.is_nan() {
            assert_eq!(got.is_sign_negative(), want.is_sign_negative());
        }
    }
}

#[test]
fn posit_inputs_decode_while_packing() {
    // posit16 codes (table path) and posit32 codes (f64 path).
    let mut g = Lcg(5);
    let (m, n, k) = (9, 20, 33);
    let av: Vec<u16> = (0..m * k).map(|_| (g.next() & 0xffff) as u16).filter(|&c| c != 0x8000).chain(std::iter::repeat(0x4000)).take(m * k).collect();
    let bv: Vec<u16> = (0..k * n).map(|_| (g.next() & 0x7fff) as u16).collect();
    let f = Some(Format::Posit(POSIT16));
    // SAFETY: views inside the vectors.
    let a = unsafe { Operand::from_raw(av.as_ptr() as *const u8, Storage::U16, f, m, k, k as isize, 1, "a").unwrap() };
    let b = unsafe { Operand::from_raw(bv.as_ptr() as *const u8, Storage::U16, f, k, n, n as isize, 1, "b").unwrap() };
    let want = naive(&a, &b);
    let mut c = vec![0f64; m * n];
    // SAFETY: c holds m x n.
    matmul_f64(&a, &b, unsafe { OutMat::from_raw(c.as_mut_ptr(), m, n, n as isize, 1) }).unwrap();
    for (x, y) in c.iter().zip(&want) {
        assert!((x - y).abs() <= 1e-12 * y.abs().max(1.0), "{x} vs {y}");
    }
    let mut c32 = vec![0f32; m * n];
    // SAFETY: c32 holds m x n.
    matmul_f32(&a, &b, unsafe { OutMat::from_raw(c32.as_mut_ptr(), m, n, n as isize, 1) }).unwrap();
    let mut absab = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            for p in 0..k {
                // SAFETY: in bounds.
                absab[i * n + j] += unsafe { (a.get_f64(i, p) * b.get_f64(p, j)).abs() };
            }
        }
    }
    for ((x, y), s) in c32.iter().zip(&want).zip(&absab) {
        assert!((*x as f64 - y).abs() <= (k as f64 + 2.0) * 2f64.powi(-24) * s, "{x} vs {y}");
    }
    let a32: Vec<u32> = (0..m * k).map(|_| (g.next() as u32) & 0x7fff_ffff).collect();
    let f32p = Some(Format::Posit(POSIT32));
    // SAFETY: views inside the vectors.
    let a = unsafe { Operand::from_raw(a32.as_ptr() as *const u8, Storage::U32, f32p, m, k, k as isize, 1, "a").unwrap() };
    assert!(!a.fits_f32());
    let want = naive(&a, &b);
    // SAFETY: c holds m x n.
    matmul_f64(&a, &b, unsafe { OutMat::from_raw(c.as_mut_ptr(), m, n, n as isize, 1) }).unwrap();
    for (x, y) in c.iter().zip(&want) {
        assert!((x - y).abs() <= 1e-12 * y.abs().max(1e-300) + 1e-300, "{x} vs {y}");
    }
}
