use super::emulate::testing::fast_round;
use super::emulate::{DirTo, Kind16};
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
    let _settings = crate::settings_write();
    use crate::convert::{detected_isa, Isa};
    // The best path (AVX-512 where the CPU has it), AVX2 and scalar.
    let isas = [None, Some(Isa::Avx2), Some(Isa::Scalar)];
    for isa in isas.into_iter().filter(|i| i.is_none_or(|i| i <= detected_isa())) {
        set_isa(isa).unwrap();
        for &(m, n, k) in &[(1, 1, 1), (5, 15, 7), (7, 17, 3), (6, 16, 256), (13, 33, 300), (64, 65, 257), (150, 20, 9), (12, 32, 513), (25, 97, 260), (11, 31, 40)] {
            check_f32(m, n, k, false);
            check_f32(m, n, k, true);
        }
        check_f32(3, 4, 0, false);
    }
    set_isa(None).unwrap();
}

#[test]
fn int8_exact_extremes() {
    let _settings = crate::settings_write();
    use crate::convert::{detected_isa, Isa};
    let isas = [None, Some(Isa::Avx2), Some(Isa::Scalar)];
    for isa in isas.into_iter().filter(|i| i.is_none_or(|i| i <= detected_isa())) {
        set_isa(isa).unwrap();
        for &(m, n, k) in &[(7, 17, 513), (6, 16, 1), (1, 1, 1025), (13, 33, 1027), (12, 32, 4)] {
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

/// The int8 vector paths (up to 8 rows of A with B's rows or columns
/// contiguous, either way round, and a matrix times a vector run transposed)
/// give the exact sums, wrapped to i32, for depths around their 16-element
/// steps and pairs, columns around their strips and units, A in either order,
/// at 1 and 2 threads (the larger shapes split over them), the row streaming
/// in several chunks with padded rows of sums; they refuse 9 rows
/// and a B with neither rows nor columns contiguous, which the loop nest takes
/// (packing full strips of a B whose columns are contiguous 8 depths at a
/// time). Writes stay inside C.
#[test]
fn int8_vector_paths_are_exact() {
    let _settings = crate::settings_write();
    let old = crate::parallel::num_threads();
    let mut g = Lcg(808);
    let mut shapes = vec![];
    for m in 1..=9 {
        for &(k, n) in &[(1, 1), (1, 17), (15, 16), (16, 33), (17, 15), (31, 40), (33, 1), (514, 47), (1027, 100)] {
            shapes.push((m, k, n));
        }
    }
    shapes.extend([(3, 1000, 1500), (3, 300, 6000), (8, 600, 2500), (2, 64, 9000), (4, 40, 4500), (1, 64, 40000), (4100, 1030, 1), (1, 140000, 3)]);
    // A few columns of B against more rows of A: run transposed.
    shapes.extend([(9, 300, 2), (40, 513, 8), (3000, 1030, 5), (17, 33, 3)]);
    for threads in [1, 2] {
        crate::parallel::set_num_threads(threads).unwrap();
        for &(m, k, n) in &shapes {
            let extreme = k == 140000;
            let av: Vec<i8> = (0..m * k).map(|_| if extreme { -128 } else { g.next() as i8 }).collect();
            // B stored with room for a stride of 2 both ways (the layout no vector path
            // takes, unless B is one column: its column stride is then the contiguous one).
            let bv: Vec<i8> = (0..4 * k * n).map(|_| if extreme { -128 } else { g.next() as i8 }).collect();
            let (ap, bp) = (av.as_ptr() as *const u8, bv.as_ptr() as *const u8);
            let (ki, ni) = (k as isize, n as isize);
            // (base offset, rs, cs, taken by a vector path)
            let b_layouts = [
                (0, ni, 1, true),
                ((ki - 1) * ni, -ni, 1, true),
                (0, 1, ki, true),
                ((ni - 1) * ki, 1, -ki, true),
                (0, 2 * ni, 2, n == 1),
            ];
            for (a_rs, a_cs) in [(ki, 1), (1, m as isize)] {
                // SAFETY: views inside av and bv.
                let a = unsafe { Operand::from_raw(ap, Storage::I8, None, m, k, a_rs, a_cs, "a").unwrap() };
                for &(off, rs, cs, vector) in &b_layouts {
                    let b = unsafe { Operand::from_raw(bp.offset(off), Storage::I8, None, k, n, rs, cs, "b").unwrap() };
                    let want: Vec<i32> = (0..m * n)
                        .map(|ij| {
                            let (i, j) = (ij / n, ij % n);
                            // SAFETY: in bounds.
                            (0..k).map(|p| unsafe { a.get_f64(i, p) * b.get_f64(p, j) } as i64).sum::<i64>() as i32
                        })
                        .collect();
                    let ldc = n + 3;
                    let mut c = vec![i32::MIN + 7; m * ldc];
                    // SAFETY: c holds m rows of ldc.
                    let out = unsafe { OutMat::from_raw(c.as_mut_ptr(), m, n, ldc as isize, 1) };
                    // (Run transposed, B's layout does not matter: A's is contiguous.)
                    let vector = n == 1 && m > 1 || n <= int8v::ROWS && m > int8v::ROWS || vector && m <= int8v::ROWS;
                    // SAFETY: avx2 on the machines that run the tests (checked); views in bounds.
                    let done = simd() && unsafe { int8v::gemv_i8(&a, &b, out) };
                    assert_eq!(done, vector && simd(), "{m}x{k}x{n} b ({rs}, {cs}): vector path taken");
                    if !done {
                        matmul_i8(&a, &b, out).unwrap();
                    }
                    for i in 0..m {
                        assert_eq!(&c[i * ldc..i * ldc + n], &want[i * n..(i + 1) * n], "{m}x{k}x{n} a ({a_rs}, {a_cs}) b ({rs}, {cs}) row {i}");
                        assert!(c[i * ldc + n..(i + 1) * ldc].iter().all(|&x| x == i32::MIN + 7), "wrote outside C");
                    }
                }
            }
        }
    }
    crate::parallel::set_num_threads(old).unwrap();
}

/// Row splits at two threads pack B once into a shared buffer, a group of strips
/// by whichever thread claims it: the results equal the one-thread results bit
/// for bit, over several depth blocks, a partial last group, two column blocks
/// (n > NC), and for the f32, f64 and int8 kernels.
#[test]
fn shared_b_packing_matches_one_thread() {
    let _settings = crate::settings_write();
    let old = crate::parallel::num_threads();
    let run = |threads: usize, f: &dyn Fn() -> Vec<f64>| {
        crate::parallel::set_num_threads(threads).unwrap();
        f()
    };
    let mut g = Lcg(77);
    for &(m, n, k) in &[(400, 200, 1100), (330, 97, 600), (4200, 4100, 2)] {
        let av: Vec<f32> = (0..m * k).map(|_| g.unit() as f32).collect();
        let bv: Vec<f32> = (0..k * n).map(|_| g.unit() as f32).collect();
        let a = op_f32(&av, m, k, k as isize, 1);
        let b = op_f32(&bv, k, n, n as isize, 1);
        let f32_run = || {
            let mut c = vec![0f32; m * n];
            // SAFETY: c holds m x n.
            matmul_f32(&a, &b, unsafe { OutMat::from_raw(c.as_mut_ptr(), m, n, n as isize, 1) }).unwrap();
            c.iter().map(|&x| x as f64).collect::<Vec<f64>>()
        };
        let f64_run = || {
            let mut c = vec![0f64; m * n];
            // SAFETY: c holds m x n.
            matmul_f64(&a, &b, unsafe { OutMat::from_raw(c.as_mut_ptr(), m, n, n as isize, 1) }).unwrap();
            c
        };
        let ai: Vec<i8> = (0..m * k).map(|_| (g.next() % 256) as u8 as i8).collect();
        let bi: Vec<i8> = (0..k * n).map(|_| (g.next() % 256) as u8 as i8).collect();
        // SAFETY: views inside the vectors.
        let a8 = unsafe { Operand::from_raw(ai.as_ptr() as *const u8, Storage::I8, None, m, k, k as isize, 1, "a").unwrap() };
        let b8 = unsafe { Operand::from_raw(bi.as_ptr() as *const u8, Storage::I8, None, k, n, n as isize, 1, "b").unwrap() };
        let i8_run = || {
            let mut c = vec![0i32; m * n];
            // SAFETY: c holds m x n.
            matmul_i8(&a8, &b8, unsafe { OutMat::from_raw(c.as_mut_ptr(), m, n, n as isize, 1) }).unwrap();
            c.iter().map(|&x| x as f64).collect::<Vec<f64>>()
        };
        for f in [&f32_run as &dyn Fn() -> Vec<f64>, &f64_run, &i8_run] {
            let one = run(1, f);
            for _ in 0..3 {
                assert!(run(2, f) == one, "{m}x{n}x{k}: two threads differ from one");
            }
        }
        if k > 2 {
            // The int8 products are exact.
            let c = run(2, &i8_run);
            for (i, j) in [(0, 0), (m - 1, n - 1), (m / 2, n / 3)] {
                let want: i64 = (0..k).map(|p| ai[i * k + p] as i64 * bi[p * n + j] as i64).sum();
                assert_eq!(c[i * n + j] as i64, want);
            }
        }
    }
    crate::parallel::set_num_threads(old).unwrap();
}

#[test]
fn padded_ld_rule() {
    let _settings = crate::settings_read();
    assert_eq!(padded_ld(1024, 4).unwrap(), 1040);
    assert_eq!(padded_ld(1008, 4).unwrap(), 1008);
    assert_eq!(padded_ld(1000, 4).unwrap(), 1008);
    assert_eq!(padded_ld(2048, 2).unwrap(), 2080);
    assert_eq!(padded_ld(1, 8).unwrap(), 8);
    for n in 1..5000 {
        for s in [1, 2, 4, 8] {
            let ld = padded_ld(n, s).unwrap();
            assert!(ld >= n && (ld * s).is_multiple_of(64) && !(ld * s).is_multiple_of(1024));
        }
    }
}

/// The fast accumulator rounding equals `Format::encode` for every mode.
#[test]
fn fast_round_matches_encode() {
    let _settings = crate::settings_read();
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
    let _settings = crate::settings_read();
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
    let _settings = crate::settings_read();
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
    let _settings = crate::settings_read();
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
    let _settings = crate::settings_read();
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

/// Every finite float16 value, both signs.
fn fp16_values() -> Vec<f32> {
    (0u16..0x7c00).flat_map(|c| [f16_to_f32(c), f16_to_f32(c | 0x8000)]).collect()
}

/// Every finite float8_e5m2 value.
fn e5m2_values() -> Vec<f32> {
    (0u64..256).map(|c| FLOAT8_E5M2.decode(c) as f32).filter(|x| x.is_finite()).collect()
}

/// Every finite bfloat16 value.
fn bf16_values() -> Vec<f32> {
    (0u32..0x7f80).flat_map(|c| [f32::from_bits(c << 16), f32::from_bits((c | 0x8000) << 16)]).collect()
}

/// The directed kernel rounding down never starts from a -0 accumulator (tiles
/// start at +0 and it stores none; see `tile16_dir`): such lanes are not compared.
fn dir_skips(kind: Kind16, mode: Mode, acc: f32) -> bool {
    matches!(kind, Kind16::Dir(_)) && mode == Mode::Down && acc.to_bits() == 0x8000_0000
}

/// The kernels that run only on depth blocks passing a bound on their values
/// (`split_ok`, `near_ok`, `block_ok`) keep every sum finite and below a limit,
/// and every product on a grid (its last bit at or above `unit`) or below a
/// bound: the split kernel (float16 below its overflow threshold, bfloat16
/// below 2^100, products on their subnormal grids), the directed kernels at
/// float16's and float8_e5m2's units (`DirTo::Unit(13)`, `Unit(21)`: below the
/// largest value) and the nearest-even kernel at float8_e5m2's unit (below its
/// largest value, products below 2^(-16 + 23) = 128), and the round-to-odd
/// kernel into float16 from finite accumulators (`OddFin`: below float16's
/// overflow threshold). Lanes outside that are not compared.
fn block_skips(kind: Kind16, bf: bool, acc: f32, p: f32) -> bool {
    let (limit, unit, pmax) = match kind {
        Kind16::Split if bf => (2f64.powi(100), 2f64.powi(-133), f64::INFINITY),
        Kind16::Split => (65520.0, 2f64.powi(-24), f64::INFINITY),
        Kind16::OddFin => (65520.0, 0.0, f64::INFINITY),
        Kind16::Dir(DirTo::Unit(13)) => (65504.0, 0.0, f64::INFINITY),
        Kind16::Dir(DirTo::Unit(21)) => (57344.0, 0.0, f64::INFINITY),
        Kind16::UnitNe => (57344.0, 0.0, 128.0),
        // Products whose scaled value (2^-112 times) is an f32: last bit at or above 2^-37.
        Kind16::OddUnit => (57344.0, 2f64.powi(-37), f64::INFINITY),
        _ => return false,
    };
    let (sum, p) = (acc as f64 + p as f64, p as f64);
    let on_grid = unit == 0.0 || (p / unit).fract() == 0.0;
    !(sum.abs() < limit && on_grid && p.abs() < pmax && acc.is_finite())
}

/// Compare the 8-lane kernel with the exact f64 rounding for every fp16 (`bf`:
/// bfloat16) accumulator and each of `prods` (NaN results must agree as NaN,
/// others bit for bit).
fn check_add16(kind: Kind16, bf: bool, mode: Mode, prods: &[f32]) {
    let e5 = matches!(kind, Kind16::Dir(DirTo::E5m2 | DirTo::Unit(21)) | Kind16::OddE5m2 | Kind16::UnitNe | Kind16::OddUnit);
    let fmt = if e5 { FLOAT8_E5M2 } else if bf { BFLOAT16 } else { FLOAT16 };
    let exact = super::emulate::testing::exact_in(fmt, mode);
    let accs = if fmt == FLOAT8_E5M2 { e5m2_values() } else if bf { bf16_values() } else { fp16_values() };
    for &p in prods {
        for acc in accs.chunks(8) {
            let mut a8 = [0f32; 8];
            a8[..acc.len()].copy_from_slice(acc);
            let got = match kind {
                Kind16::Dir(DirTo::Unit(_)) => super::emulate::testing::unit_lanes(fmt, mode, a8, p, [1.0; 8]),
                _ => super::emulate::testing::add16_lanes(kind, bf, mode, a8, p, [1.0; 8]),
            };
            let Some(got) = got else { return };
            for l in 0..8 {
                if dir_skips(kind, mode, a8[l]) || block_skips(kind, bf, a8[l], p) {
                    continue;
                }
                let want = exact(a8[l] as f64, p as f64);
                let g = got[l] as f64;
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "{kind:?} bf={bf} {mode:?}: acc {:e} + p {p:e}: got {g:e}, want {want:e}",
                    a8[l]
                );
            }
        }
    }
}

/// The FMA path (f32 sum, then fp16 or bf16) is exact for every fp16 and bf16
/// accumulator and every product of two values of the fp8 formats it is used for.
#[test]
#[cfg_attr(debug_assertions, ignore = "exhaustive: run in release mode")]
fn fp16_fma_path_exhaustive() {
    let _settings = crate::settings_read();
    let mut prods: Vec<u64> = Vec::new();
    for fa in super::emulate::FMA16_INPUTS {
        for fb in super::emulate::FMA16_INPUTS {
            for ca in 0..256u64 {
                let x = fa.decode(ca);
                for cb in 0..256u64 {
                    let y = fb.decode(cb);
                    let p = x * y;
                    if p.is_finite() {
                        assert_eq!(p as f32 as f64, p, "product exact in f32");
                        prods.push(p.to_bits());
                    }
                }
            }
        }
    }
    prods.sort_unstable();
    prods.dedup();
    // Both signs and zeros of both signs are in the list (the formats have signed values).
    assert!(prods.len() > 3000);
    let prods: Vec<f32> = prods.iter().map(|&b| f64::from_bits(b) as f32).collect();
    check_add16(Kind16::Fma, false, Mode::NearestEven, &prods);
    check_add16(Kind16::Fma, true, Mode::NearestEven, &prods);
    check_add16(Kind16::Split, false, Mode::NearestEven, &prods);
    check_add16(Kind16::Split, true, Mode::NearestEven, &prods);
    check_add16(Kind16::OddE5m2, false, Mode::NearestEven, &prods);
    check_add16(Kind16::OddUnit, false, Mode::NearestEven, &prods);
    // The nearest-even kernel at float8_e5m2's unit runs on products below 128: 1926 of them.
    assert_eq!(prods.iter().filter(|p| p.abs() < 128.0).count(), 1926);
    check_add16(Kind16::UnitNe, false, Mode::NearestEven, &prods);
    for mode in [Mode::TowardZero, Mode::Up, Mode::Down] {
        check_add16(Kind16::Dir(DirTo::F16), false, mode, &prods);
        check_add16(Kind16::Dir(DirTo::Bf16), true, mode, &prods);
        check_add16(Kind16::Dir(DirTo::E5m2), false, mode, &prods);
        // float16 and float8_e5m2 at their units, on scaled values.
        check_add16(Kind16::Dir(DirTo::Unit(13)), false, mode, &prods);
        check_add16(Kind16::Dir(DirTo::Unit(21)), false, mode, &prods);
    }
}

/// Veltkamp's split `t - (t - s)`, `t = s * (2^q + 1)`, rounds every f32 `s` of
/// float16's normal range (and every bfloat16-range f32 below 2^100) to
/// nearest-even at 11 (8) bits: the `Kind16::Split` kernel against `vcvtps2ph`
/// and the integer rounding of the top 16 bits, for every f32 pattern from
/// 2^-14 up to float16's overflow threshold and a sweep of the bfloat16 range.
#[test]
#[cfg_attr(debug_assertions, ignore = "exhaustive: run in release mode")]
fn split_rounds_to_nearest_even() {
    let _settings = crate::settings_read();
    let (lo, hi) = (2f32.powi(-14).to_bits(), 65520f32.to_bits());
    let fp16 = |x: f32| half::f16::from_f32(x).to_f32();
    let bf16 = |x: f32| {
        let b = x.to_bits();
        f32::from_bits((b + 0x7fff + ((b >> 16) & 1)) & 0xffff_0000)
    };
    let mut checked = 0u64;
    for (bf, step, top) in [(false, 1u32, hi), (true, 61, 2f32.powi(100).to_bits())] {
        let first = if bf { 2f32.powi(-126).to_bits() } else { lo };
        let mut x = first;
        while x < top {
            let mut s = [0f32; 8];
            for (l, v) in s.iter_mut().enumerate() {
                // Four patterns, each with both signs.
                let b = (x + (l / 2) as u32 * step).min(top - 1);
                *v = if l % 2 == 1 { -f32::from_bits(b) } else { f32::from_bits(b) };
            }
            // fma(0, 0, s) = s: the kernel's rounding of s.
            let Some(got) = super::emulate::testing::add16_lanes(Kind16::Split, bf, Mode::NearestEven, s, 0.0, [0.0; 8]) else { return };
            for l in 0..8 {
                let want = if bf { bf16(s[l]) } else { fp16(s[l]) };
                assert_eq!(got[l].to_bits(), want.to_bits(), "bf={bf}: split of {:e}", s[l]);
            }
            checked += 8;
            x += 4 * step;
        }
    }
    assert!(checked > 30 * (1 << 23));
}

/// Veltkamp's split with `q = 24 - prec` rounds to nearest-even at `prec` bits
/// for every precision [`Kind16::Split`] may use (3 to 11): every significand of
/// one binade (the split of a normal f32 depends on its significand only, while
/// `t` stays finite), and a sweep from 2^-126 to 2^64, against the integer
/// rounding of the pattern.
#[test]
#[cfg_attr(debug_assertions, ignore = "exhaustive: run in release mode")]
fn split_rounds_to_nearest_even_any_precision() {
    let _settings = crate::settings_read();
    let mut checked = 0u64;
    for prec in 3..=11 {
        let u = 24 - prec as u32;
        let want = |x: f32| {
            let b = x.to_bits();
            f32::from_bits((b + ((1 << (u - 1)) - 1) + ((b >> u) & 1)) & !((1u32 << u) - 1))
        };
        let binade = (1f32.to_bits(), 2f32.to_bits(), 1u32);
        let sweep = (2f32.powi(-126).to_bits(), 2f32.powi(64).to_bits(), 997u32);
        for (first, top, step) in [binade, sweep] {
            let mut x = first;
            while x < top {
                let mut s = [0f32; 8];
                for (l, v) in s.iter_mut().enumerate() {
                    let b = (x + (l / 2) as u32 * step).min(top - 1);
                    *v = if l % 2 == 1 { -f32::from_bits(b) } else { f32::from_bits(b) };
                }
                let Some(got) = super::emulate::testing::split_lanes(prec, s) else { return };
                for l in 0..8 {
                    assert_eq!(got[l].to_bits(), want(s[l]).to_bits(), "prec {prec}: split of {:e}", s[l]);
                }
                checked += 8;
                x += 4 * step;
            }
        }
    }
    assert!(checked > 9 * (1 << 24));
}

/// The TwoSum / round-to-odd path is exact for any f32 product: random values over
/// the whole f32 range, values that put the sum a hair off an fp16 tie, and specials.
#[test]
#[cfg_attr(debug_assertions, ignore = "exhaustive over the accumulator: run in release mode")]
fn fp16_odd_path_adversarial() {
    let _settings = crate::settings_read();
    let mut g = Lcg(11);
    let mut prods: Vec<f32> = Vec::new();
    for _ in 0..600 {
        // Random sign, exponent in [-149, 100], significand.
        let e = (g.next() % 250) as i32 - 149;
        let sig = 1.0 + (g.next() % (1 << 23)) as f64 / (1u64 << 23) as f64;
        let v = (sig * 2f64.powi(e)) as f32;
        prods.push(if g.next() & 1 == 1 { -v } else { v });
    }
    for _ in 0..400 {
        // An fp16 tie (odd multiple of half a unit, various binades) plus or minus a tiny tail.
        let unit_e = (g.next() % 31) as i32 - 24;
        let m = ((g.next() % 2048) | 1) as f64;
        let tail = [0.0, 2f64.powi(unit_e - 14), -2f64.powi(unit_e - 14), 2f64.powi(unit_e - 12)][(g.next() % 4) as usize];
        let v = (m * 2f64.powi(unit_e - 1) + tail) as f32;
        prods.push(if g.next() & 1 == 1 { -v } else { v });
    }
    for _ in 0..300 {
        // Ties of the fp16 subnormal grid (odd multiples of 2^-25) a hair off, by less
        // than an f32 unit of sums in [2^-15, 2^-14): with a subnormal accumulator the
        // f32 sum can land on a tie that the exact sum is not on.
        let m = ((g.next() % 512) | 1) as f64;
        let tail = 2f64.powi(-39 - (g.next() % 6) as i32) * if g.next() & 1 == 1 { -1.0 } else { 1.0 };
        let v = (m * 2f64.powi(-25) + tail) as f32;
        prods.push(if g.next() & 1 == 1 { -v } else { v });
    }
    prods.extend([0.0, -0.0, f32::MIN_POSITIVE, -1e-45, 65504.0, 65519.99, 65520.0, -65520.0, 1e30, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
    check_add16(Kind16::Odd, false, Mode::NearestEven, &prods);
    // Its variant from finite accumulators, on sums below float16's overflow threshold.
    check_add16(Kind16::OddFin, false, Mode::NearestEven, &prods);
    for mode in [Mode::TowardZero, Mode::Up, Mode::Down] {
        check_add16(Kind16::Dir(DirTo::F16), false, mode, &prods);
        check_add16(Kind16::Dir(DirTo::E5m2), false, mode, &prods);
    }
    // At the units of float16 and float8_e5m2, the products whose halves of the scale are exact.
    let (sa, _) = super::emulate::testing::unit_scales(FLOAT16);
    let scalable: Vec<f32> = prods.iter().copied().filter(|&p| p.is_nan() || p * 2f32.powi(sa) * 2f32.powi(-sa) == p).collect();
    assert!(scalable.len() * 4 > prods.len() * 3, "{} of {}", scalable.len(), prods.len());
    for mode in [Mode::TowardZero, Mode::Up, Mode::Down] {
        check_add16(Kind16::Dir(DirTo::Unit(13)), false, mode, &scalable);
        check_add16(Kind16::Dir(DirTo::Unit(21)), false, mode, &scalable);
    }
    check_add16(Kind16::Mid, false, Mode::NearestEven, &prods);
    check_add16(Kind16::OddE5m2, false, Mode::NearestEven, &prods);
    check_add16(Kind16::OddUnit, false, Mode::NearestEven, &prods);
    // bfloat16: the same, with ties of the bf16 grid a hair off, and sums at the top of the range.
    for _ in 0..400 {
        let unit_e = (g.next() % 250) as i32 - 133;
        let m = ((g.next() % 256) | 1) as f64;
        let tail = [0.0, 2f64.powi(unit_e - 17), -2f64.powi(unit_e - 17), 2f64.powi(unit_e - 15)][(g.next() % 4) as usize];
        let v = (m * 2f64.powi(unit_e - 1) + tail) as f32;
        prods.push(if g.next() & 1 == 1 { -v } else { v });
    }
    prods.extend([3.3e38, -3.39e38, f32::MAX, 1.7e38, 2f32.powi(-133), -(2f32.powi(-140))]);
    check_add16(Kind16::Odd, true, Mode::NearestEven, &prods);
    check_add16(Kind16::Mid, true, Mode::NearestEven, &prods);
    for mode in [Mode::TowardZero, Mode::Up, Mode::Down] {
        check_add16(Kind16::Dir(DirTo::Bf16), true, mode, &prods);
    }
    // Non-finite accumulators.
    let directed = [Mode::TowardZero, Mode::Up, Mode::Down];
    for (bf, mode) in [(false, Mode::NearestEven), (true, Mode::NearestEven)].into_iter().chain(directed.iter().flat_map(|&m| [(false, m), (true, m)])) {
        let exact = super::emulate::testing::exact16(bf, mode);
        let accs = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 0.0, -0.0, 1.0, -65504.0, 6e-8];
        let kinds = match (bf, mode) {
            (_, Mode::NearestEven) => vec![Kind16::Fma, Kind16::Odd, Kind16::Mid],
            (false, _) => vec![Kind16::Dir(DirTo::F16)],
            (true, _) => vec![Kind16::Dir(DirTo::Bf16)],
        };
        for kind in kinds {
            for &p in &[0.0, -0.0, 1.0, -3.0, 1e30, f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
                let Some(got) = super::emulate::testing::add16_lanes(kind, bf, mode, accs, p, [1.0; 8]) else { return };
                for l in (0..8).filter(|&l| !dir_skips(kind, mode, accs[l])) {
                    let want = exact(accs[l] as f64, p as f64);
                    let gl = got[l] as f64;
                    assert!(gl.to_bits() == want.to_bits() || (gl.is_nan() && want.is_nan()), "{kind:?} bf={bf} {mode:?} {} + {p}: {gl} vs {want}", accs[l]);
                }
            }
        }
    }
}

/// The directed-mode kernels round products that are not exact in f32 (two 24-bit
/// significands) correctly, for every float16 and bfloat16 accumulator and random
/// float32 ones: random products over the f32 range, products a hair off grid
/// points of float16 and off zero, specials.
#[test]
#[cfg_attr(debug_assertions, ignore = "exhaustive over the accumulator: run in release mode")]
fn directed_path_inexact_products() {
    let _settings = crate::settings_read();
    let mut g = Lcg(31);
    let sig = |g: &mut Lcg| 1.0 + (g.next() % (1 << 23)) as f32 / (1u32 << 23) as f32;
    let mut pairs: Vec<(f32, [f32; 8])> = Vec::new();
    for _ in 0..300 {
        let a = sig(&mut g) * 2f32.powi((g.next() % 60) as i32 - 40);
        let b: [f32; 8] = std::array::from_fn(|_| {
            let v = sig(&mut g) * 2f32.powi((g.next() % 60) as i32 - 40);
            if g.next() & 1 == 1 { -v } else { v }
        });
        pairs.push((a, b));
    }
    for _ in 0..300 {
        // a*b = (grid point of float16 at unit 2^ue) * (1 + tiny), tiny = +-2^-30 .. 2^-46:
        // the f32 sum lands on or next to the grid point.
        let ue = (g.next() % 40) as i32 - 24;
        let m = (g.next() % 2048) as f64 + 1.0;
        let tail = 2f64.powi(-30 - (g.next() % 17) as i32);
        let b: [f32; 8] = std::array::from_fn(|l| {
            let t = if l % 2 == 0 { 1.0 + tail } else { 1.0 - tail };
            (if l >= 4 { -t } else { t }) as f32
        });
        pairs.push(((m * 2f64.powi(ue)) as f32, b));
    }
    pairs.push((1e-30, [1e-20, -1e-20, 3e-25, -7e-26, 1e30, -1e38, f32::INFINITY, f32::NAN]));
    pairs.push((-3.0, [0.0, -0.0, 1.0 / 3.0, 65504.0 / 3.0, 21845.334, 1e-8, -1e-8, f32::MAX]));
    // float32 accumulators: every float16 value, values over the f32 range, the extremes.
    let mut acc32 = fp16_values();
    for _ in 0..20000 {
        let v = sig(&mut g) * 2f32.powi((g.next() % 120) as i32 - 60);
        acc32.push(if g.next() & 1 == 1 { -v } else { v });
    }
    acc32.extend([f32::MAX, -f32::MAX, f32::MIN_POSITIVE, -1e-45, 1e-40]);
    let mut acc_e5 = e5m2_values();
    acc_e5.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
    let mut e5_fin = e5m2_values();
    e5_fin.push(f32::NAN);
    let targets = [
        (DirTo::F16, FLOAT16, fp16_values()),
        (DirTo::Bf16, BFLOAT16, bf16_values()),
        (DirTo::F32, FLOAT32, acc32),
        (DirTo::E5m2, FLOAT8_E5M2, acc_e5),
        (DirTo::Unit(13), FLOAT16, fp16_values()),
        (DirTo::Unit(21), FLOAT8_E5M2, e5_fin),
    ];
    // The Unit kernels run on scaled values: the pairs whose halves of the scale are
    // exact, and sums below the largest value (their depth blocks' bound).
    let (sa, sb) = super::emulate::testing::unit_scales(FLOAT16);
    let exact_by = |x: f32, s: i32| x.is_nan() || x * 2f32.powi(s) * 2f32.powi(-s) == x;
    let scalable = pairs.iter().filter(|(a, b)| exact_by(*a, sa) && b.iter().all(|&y| exact_by(y, sb))).count();
    assert!(scalable * 2 > pairs.len(), "{scalable} of {}", pairs.len());
    for mode in [Mode::TowardZero, Mode::Up, Mode::Down] {
        for (to, fmt, accs) in &targets {
            let kind = Kind16::Dir(*to);
            let exact = super::emulate::testing::exact_in(*fmt, mode);
            let unit = matches!(to, DirTo::Unit(_));
            for (a, b) in &pairs {
                if unit && !(exact_by(*a, sa) && b.iter().all(|&y| exact_by(y, sb))) {
                    continue;
                }
                for acc in accs.chunks(8) {
                    let mut a8 = [0f32; 8];
                    a8[..acc.len()].copy_from_slice(acc);
                    let got = if unit {
                        super::emulate::testing::unit_lanes(*fmt, mode, a8, *a, *b)
                    } else {
                        super::emulate::testing::add16_lanes(kind, *to == DirTo::Bf16, mode, a8, *a, *b)
                    };
                    let Some(got) = got else { return };
                    for l in (0..8).filter(|&l| !dir_skips(kind, mode, a8[l])) {
                        // The product of two f32 values is exact in f64.
                        let want = exact(a8[l] as f64, *a as f64 * b[l] as f64);
                        if unit && !(a8[l] as f64 + *a as f64 * b[l] as f64).abs().lt(&fmt.max_value()) {
                            continue;
                        }
                        let gl = got[l] as f64;
                        assert!(gl.to_bits() == want.to_bits() || (gl.is_nan() && want.is_nan()), "{to:?} {mode:?} {} + {a:e}*{:e}: {gl:e} vs {want:e}", a8[l], b[l]);
                    }
                }
            }
        }
    }
}

/// Codes of `fmt` for a matrix: mostly ordinary values, with the extremes mixed in
/// (largest values, subnormals, zeros of both signs, NaN / inf where the format
/// has them), one in `every` codes.
fn fp8_codes(g: &mut Lcg, len: usize, specials: &[u8], every: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            let r = g.next();
            if r.is_multiple_of(every) {
                specials[(r / every) as usize % specials.len()]
            } else {
                // Exponent field biased toward the middle of the range.
                (r >> 8) as u8 & 0x8f | (((r >> 20) % 6 + 5) as u8) << 3
            }
        })
        .collect()
}

/// A depth block runs the split kernel only while the accumulators it starts
/// from leave room: ones times 224 (e4m3fn) over 300 steps fill a float16
/// accumulator to 57344 in the first depth block, whose own bound holds; the
/// second would carry it past 65504 and must overflow to inf as the exact
/// rounding does. With 208 the sums stay finite (62400) on the split kernel.
#[test]
fn split_blocks_count_the_accumulators() {
    let _settings = crate::settings_read();
    let (m, n, k) = (6, 16, 300);
    let one = FLOAT8_E4M3FN.encode(1.0, &RoundOpts::new(Mode::NearestEven), 0) as u8;
    let a8 = vec![one; m * k];
    for (bv, want_inf) in [(224.0, true), (208.0, false)] {
        let code = FLOAT8_E4M3FN.encode(bv, &RoundOpts::new(Mode::NearestEven), 0) as u8;
        let b8 = vec![code; k * n];
        let f = Some(Format::Float(FLOAT8_E4M3FN));
        // SAFETY: views inside the vectors.
        let (a, b) = unsafe {
            (
                Operand::from_raw(a8.as_ptr(), Storage::U8, f, m, k, k as isize, 1, "a").unwrap(),
                Operand::from_raw(b8.as_ptr(), Storage::U8, f, k, n, n as isize, 1, "b").unwrap(),
            )
        };
        for chunk in [None, Some((280, Format::Float(FLOAT16)))] {
            let spec = AccumSpec { fmt: Format::Float(FLOAT16), chunk, opts: RoundOpts::new(Mode::NearestEven) };
            let mut got = vec![0f64; m * n];
            let mut want = vec![0f64; m * n];
            // SAFETY: both hold m x n.
            matmul_emulated(&a, &b, unsafe { OutMat::from_raw(got.as_mut_ptr(), m, n, n as isize, 1) }, &spec).unwrap();
            super::emulate::testing::matmul_f64_lanes(&a, &b, unsafe { OutMat::from_raw(want.as_mut_ptr(), m, n, n as isize, 1) }, &spec).unwrap();
            assert!(want.iter().all(|w| w.is_infinite() == want_inf), "{bv} {chunk:?}: {want:?}");
            assert_eq!(got, want, "{bv} {chunk:?}");
        }
    }
}

/// The f32 tile kernels give exactly the f64 lanes' results, for fp8 and bf16
/// inputs into float16 and bfloat16 accumulators, with and without chunks,
/// including overflow, NaN/inf, subnormal sums and blocks that fall back to f64
/// (values beyond f32 products).
#[test]
fn emulated_fp16_tile_paths_match_f64_lanes() {
    let _settings = crate::settings_read();
    let mut g = Lcg(21);
    let (f16, bf16) = (Format::Float(FLOAT16), Format::Float(BFLOAT16));
    // (9, 530, 33): several B panels, one row block (columns split across threads).
    let shapes = [(1, 1, 1), (7, 17, 5), (13, 37, 300), (50, 70, 129), (9, 530, 33), (100, 300, 20)];
    for (m, n, k) in shapes {
        for case in 0..11 {
            // 0, 1: fp8 (e4m3fn, e5m2 with inf), 8, 9: the same with the extremes
            // rare (the split kernel's blocks, and the blocks that an extreme value
            // sends back to the conversions), 10: small e5m2 values (2^-14 to
            // 2^-7: sums in float16's subnormal range, off its grid), 2: bf16 normal, 3: bf16 with extreme
            // values, 4: bf16 near the top and bottom of the f32 products' range,
            // 5, 6: fp16 (products of 22 bits: the midpoint-checking kernel) with
            // values spread over its range, and with subnormals and extremes,
            // 7: float32 (products inexact in f32: the directed modes' kernel only).
            let (av, bv): (Vec<u16>, Vec<u16>);
            let (sa, fa) = match case {
                0 | 8 => (Storage::U8, FLOAT8_E4M3FN),
                1 | 9 | 10 => (Storage::U8, FLOAT8_E5M2),
                7 => (Storage::U32, FLOAT32),
                5 | 6 => (Storage::U16, FLOAT16),
                _ => (Storage::U16, BFLOAT16),
            };
            let mut a8 = Vec::new();
            let mut b8 = Vec::new();
            let f32s = |g: &mut Lcg, len: usize| -> Vec<u32> {
                (0..len)
                    .map(|_| {
                        let r = g.next();
                        let x = (g.unit() * 4.0 - 2.0) as f32 * 2f32.powi((r % 9) as i32 - 4);
                        let x = if r.is_multiple_of(29) { [65504.0, -1e-7, 3e-5, 1e20, -f32::MIN_POSITIVE, 0.0][(r / 29) as usize % 6] } else { x };
                        x.to_bits()
                    })
                    .collect()
            };
            let (a32, b32) = if case == 7 { (f32s(&mut g, m * k), f32s(&mut g, k * n)) } else { (Vec::new(), Vec::new()) };
            if case == 10 {
                let small = |g: &mut Lcg, len: usize| -> Vec<u8> { (0..len).map(|_| (g.next() >> 8) as u8 & 0x83 | (((g.next() % 8) + 1) as u8) << 2).collect() };
                a8 = small(&mut g, m * k);
                b8 = small(&mut g, k * n);
                av = Vec::new();
                bv = Vec::new();
            } else if !(2..8).contains(&case) {
                let specials: &[u8] = if case % 8 == 0 { &[0x7e, 0xfe, 0x7f, 0x80, 0x00, 0x01, 0x81] } else { &[0x7b, 0xfb, 0x7c, 0xfc, 0x7f, 0x80, 0x01] };
                let every = if case < 2 { 23 } else { 1500 };
                a8 = fp8_codes(&mut g, m * k, specials, every);
                b8 = fp8_codes(&mut g, k * n, specials, every);
                av = Vec::new();
                bv = Vec::new();
            } else {
                let mk = |g: &mut Lcg, len: usize| -> Vec<u16> {
                    (0..len)
                        .map(|_| {
                            let r = g.next();
                            let x = (g.unit() * 4.0) as f32;
                            let x = if case == 3 && r.is_multiple_of(17) {
                                [1e30f32, -3e-39, f32::INFINITY, 7e-45, -65504.0, 1e-30][(r / 17) as usize % 6]
                            } else if case == 4 {
                                x * [1.0, 2f32.powi(61), -(2f32.powi(-70))][(r % 3) as usize]
                            } else if case == 5 {
                                x * 2f32.powi((r % 13) as i32 - 6)
                            } else if case == 6 {
                                x * [1.0, 2f32.powi(-14), -(2f32.powi(-20)), 2f32.powi(7), 65504.0, f32::INFINITY][(r % 6) as usize]
                            } else {
                                x
                            };
                            if case >= 5 {
                                FLOAT16.encode(x as f64, &RoundOpts::new(Mode::NearestEven), 0) as u16
                            } else {
                                (x.to_bits() >> 16) as u16
                            }
                        })
                        .collect()
                };
                av = mk(&mut g, m * k);
                bv = mk(&mut g, k * n);
            }
            let f = Some(Format::Float(fa));
            // SAFETY: views inside the vectors.
            let (a, b) = unsafe {
                if case == 7 {
                    (
                        Operand::from_raw(a32.as_ptr() as *const u8, sa, f, m, k, k as isize, 1, "a").unwrap(),
                        Operand::from_raw(b32.as_ptr() as *const u8, sa, f, k, n, n as isize, 1, "b").unwrap(),
                    )
                } else if !(2..8).contains(&case) {
                    (
                        Operand::from_raw(a8.as_ptr(), sa, f, m, k, k as isize, 1, "a").unwrap(),
                        Operand::from_raw(b8.as_ptr(), sa, f, k, n, n as isize, 1, "b").unwrap(),
                    )
                } else {
                    (
                        Operand::from_raw(av.as_ptr() as *const u8, sa, f, m, k, k as isize, 1, "a").unwrap(),
                        Operand::from_raw(bv.as_ptr() as *const u8, sa, f, k, n, n as isize, 1, "b").unwrap(),
                    )
                }
            };
            let f32f = Format::Float(FLOAT32);
            let opts = RoundOpts::new;
            let mut modes = vec![(f16, opts(Mode::NearestEven)), (bf16, opts(Mode::NearestEven)), (Format::Float(FLOAT8_E5M2), opts(Mode::NearestEven))];
            for mode in [Mode::TowardZero, Mode::Up, Mode::Down] {
                modes.extend([(f16, opts(mode)), (bf16, opts(mode)), (f32f, opts(mode)), (Format::Float(FLOAT8_E5M2), opts(mode))]);
            }
            // Stochastic with few random bits: the stochastic tile kernel (fp16 from
            // e4m3fn products, bf16 from fp8, bf16 and fp16 products, FloatFormat(6, 9)
            // and (5, 4) from fp8 products; e5m2, whose blocks take the kernel that
            // watches its sums), up to the bits f32 keeps below the unit.
            let custom = |e, m| Format::Float(crate::format::FloatFormat::new(e, m, None, true, crate::format::NanPolicy::Ieee, true).unwrap());
            // Nearest-even into FloatFormat(6, 9) and (5, 7) from fp8 products: the
            // split kernel at 10 and 8 bits, its chunk totals by `flush_split`.
            modes.extend([(custom(6, 9), opts(Mode::NearestEven)), (custom(5, 7), opts(Mode::NearestEven))]);
            // The directed kernel at their units (and float8_e4m3's, IEEE-style):
            // bfloat16's integer rounding moved down the pattern.
            for mode in [Mode::TowardZero, Mode::Up, Mode::Down] {
                modes.extend([(custom(6, 9), opts(mode)), (custom(5, 7), opts(mode)), (Format::Float(FLOAT8_E4M3), opts(mode))]);
            }
            for (fmt, rbits) in [(f16, 1), (f16, 9), (f16, 13), (bf16, 5), (bf16, 16), (custom(6, 9), 14), (custom(6, 9), 3), (custom(5, 4), 19), (Format::Float(FLOAT8_E5M2), 21), (Format::Float(FLOAT8_E5M2), 4)] {
                let key = crate::round::SeedKey::from_seed(rbits as u64 + 7);
                modes.push((fmt, RoundOpts { rbits, key, ..opts(Mode::Stochastic) }));
            }
            for (fmt, o, chunk) in modes.into_iter().flat_map(|(fmt, o)| {
                let other = if fmt == f16 { bf16 } else { f16 };
                [None, Some((64, fmt)), Some((7, fmt)), Some((5, Format::Float(FLOAT32))), Some((9, other))].map(|c| (fmt, o, c))
            }) {
                let mode = o.mode;
                let spec = AccumSpec { fmt, chunk, opts: o };
                let mut got = vec![0f64; m * n];
                let mut want = vec![0f64; m * n];
                // SAFETY: both hold m x n.
                matmul_emulated(&a, &b, unsafe { OutMat::from_raw(got.as_mut_ptr(), m, n, n as isize, 1) }, &spec).unwrap();
                super::emulate::testing::matmul_f64_lanes(&a, &b, unsafe { OutMat::from_raw(want.as_mut_ptr(), m, n, n as isize, 1) }, &spec).unwrap();
                for (idx, (x, y)) in got.iter().zip(&want).enumerate() {
                    assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()), "{m}x{n}x{k} case {case} {fmt:?} {mode:?} rbits {} {chunk:?} [{idx}]: {x:e} vs {y:e}", o.rbits);
                }
            }
        }
    }
}

/// The vectorized stochastic step (random bits drawn in lanes, rounding by an
/// add-and-truncate) equals `Fast::add` with `Rng::bits` element by element:
/// grid points, midpoints, values a hair off them, subnormals, values below the
/// smallest subnormal, overflow, inf/NaN, zeros; indices across 2^32.
#[test]
fn stochastic_step_matches_scalar() {
    let _settings = crate::settings_read();
    let mut g = Lcg(31);
    let fmts = [
        Format::Float(FLOAT16),
        Format::Float(BFLOAT16),
        Format::Float(FLOAT8_E5M2),
        Format::Float(FLOAT8_E4M3FN),
        Format::Float(FloatFormat::new(6, 9, None, true, crate::format::NanPolicy::Ieee, true).unwrap()),
    ];
    let mut checked = 0;
    for f in fmts {
        let Format::Float(ff) = f else { unreachable!() };
        let q = |x: f64| f.decode(f.encode(x, &RoundOpts::new(Mode::TowardZero), 0));
        for rbits in [1, 7, 23, 32] {
            for rep in 0..40 {
                let n = 37;
                let mut row = Vec::new();
                let mut bp = Vec::new();
                for _ in 0..n {
                    let e = (g.next() % ((ff.emax() - ff.emin() + ff.man_bits as i32 + 8) as u64)) as i32 + ff.emin() - ff.man_bits as i32 - 5;
                    let acc = q(g.unit() * 2f64.powi(e));
                    let unit = 2f64.powi(e.max(ff.emin()) - ff.man_bits as i32);
                    let p = match g.next() % 8 {
                        0 => unit / 2.0,
                        1 => unit / 2.0 + unit * 2f64.powi(-30),
                        2 => -unit * 1.5,
                        3 => g.unit() * unit * 2f64.powi(-40),
                        4 => [f64::INFINITY, f64::NAN, -0.0, ff.max_value() * 0.99][(g.next() % 4) as usize],
                        _ => g.unit() * 2f64.powi(e),
                    };
                    row.push(if acc.is_finite() { acc } else { 0.0 });
                    bp.push(p);
                }
                let base = if rep % 2 == 0 { g.next() } else { (1u64 << 32) - (g.next() % 200) };
                let stride = 1 + g.next() % 50;
                let Some((got, want)) = super::emulate::testing::st_step_both(f, rbits, &row, &bp, 1.0, base, stride, false) else { return };
                for j in 0..n {
                    assert!(
                        got[j].to_bits() == want[j].to_bits() || (got[j].is_nan() && want[j].is_nan()),
                        "{f:?} rbits {rbits} acc {:e} + {:e}: {:e} vs {:e}",
                        row[j],
                        bp[j],
                        got[j],
                        want[j]
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 5000);
}

/// The stochastic step's exact-sum variant (no TwoSum, used when the formats make
/// every `acc + a*b` exact in f64): fp16 accumulators and e4m3fn x e5m2 products.
#[test]
fn stochastic_step_exact_sums() {
    let _settings = crate::settings_read();
    let mut g = Lcg(41);
    let f = Format::Float(FLOAT16);
    let fp16 = fp16_values();
    for rbits in [3, 16, 32] {
        for rep in 0..300 {
            let n = 45;
            let row: Vec<f64> = (0..n).map(|_| fp16[(g.next() % fp16.len() as u64) as usize] as f64).collect();
            let bp: Vec<f64> = (0..n)
                .map(|_| FLOAT8_E5M2.decode(g.next() % 256) * FLOAT8_E4M3FN.decode(g.next() % 256))
                .collect();
            let base = if rep % 3 == 0 { (1u64 << 32) - (g.next() % 300) } else { g.next() };
            let Some((got, want)) = super::emulate::testing::st_step_both(f, rbits, &row, &bp, 1.0, base, 1 + g.next() % 9, true) else { return };
            for j in 0..n {
                assert!(got[j].to_bits() == want[j].to_bits() || (got[j].is_nan() && want[j].is_nan()), "{:e} + {:e}: {:e} vs {:e}", row[j], bp[j], got[j], want[j]);
            }
        }
    }
}

/// Accumulator formats of the register-tile tests: fp16, bf16, e5m2 and a (6, 9) float.
fn tile_formats() -> Vec<Format> {
    vec![
        Format::Float(FLOAT16),
        Format::Float(BFLOAT16),
        Format::Float(FLOAT8_E5M2),
        Format::Float(FloatFormat::new(6, 9, None, true, crate::format::NanPolicy::Ieee, true).unwrap()),
    ]
}

/// The register tile equals `Fast::add` (with `Rng::bits` when stochastic)
/// step by step in every mode, or declines the tile: sums in the normal range
/// round in the tile; subnormal-range sums, overflow and inf/NaN make it
/// decline (the step path redoes them). Exact-sum and TwoSum variants, 1 to
/// TILE_ROWS rows, stochastic with 1, 9 and 32 random bits (and the
/// stochastic tile toward zero, [`tile_both`], subnormal sums included) (float32: the word
/// shifted right), indices near 2^32, formats up to float32.
#[test]
fn register_tile_matches_scalar() {
    let _settings = crate::settings_read();
    use super::emulate::testing::{tile_both, TILE_ROWS};
    let mut g = Lcg(53);
    let mut fmts = tile_formats();
    fmts.push(Format::Float(FloatFormat::new(8, 20, None, true, crate::format::NanPolicy::Ieee, true).unwrap()));
    fmts.push(Format::Float(FLOAT32));
    let modes = [Mode::Stochastic, Mode::NearestEven, Mode::NearestAway, Mode::TowardZero, Mode::Up, Mode::Down, Mode::Odd];
    let (mut ran, mut declined, mut exact_runs, mut quiet_runs) = (0, 0, 0, 0);
    for f in fmts {
        let Format::Float(ff) = f else { unreachable!() };
        let q = |x: f64| f.decode(f.encode(x, &RoundOpts::new(Mode::NearestEven), 0));
        for (mode, rbits) in modes.iter().flat_map(|&m| if m == Mode::Stochastic { vec![(m, 1), (m, 9), (m, 32)] } else { vec![(m, 32)] }) {
            for rep in 0..40 {
                let nr = 1 + rep % TILE_ROWS;
                let kn = 1 + (g.next() % 40) as usize;
                // Accumulators and products around 2^e; some cases push sums out of
                // the normal range (tiny products from zero, huge ones, inf/NaN).
                let e = ff.emin() + (g.next() % ((ff.emax() - ff.emin()) as u64)) as i32;
                let acc: Vec<f64> = (0..TILE_ROWS * 8).map(|_| if g.next().is_multiple_of(5) { 0.0 } else { q(g.unit() * 2f64.powi(e)) }).collect();
                let ap: Vec<f64> = (0..kn * TILE_ROWS).map(|_| q(g.unit() * 2f64.powi((g.next() % 4) as i32))).collect();
                let bp: Vec<f64> = (0..kn * 8)
                    .map(|_| match (rep % 6, g.next() % 50) {
                        (0, 0) => 2f64.powi(ff.emin() - 3),
                        (1, 0) => ff.max_value(),
                        (2, 0) => [f64::INFINITY, f64::NAN][(g.next() % 2) as usize],
                        (3, _) => 0.0,
                        (4, _) => q(g.unit() * 2f64.powi(e - 3 - (g.next() % 30) as i32)),
                        _ => q(g.unit() * 2f64.powi(e - 2)),
                    })
                    .collect();
                let steps = 1 + g.next() % 600;
                let base_e = if rep % 3 == 0 { ((1u64 << 32) - g.next() % 4000) / steps } else { g.next() % 100_000 };
                let e0s = std::array::from_fn(|r| base_e + r as u64 * (8 + g.next() % 5));
                let t0 = g.next() % steps.saturating_sub(kn as u64).max(1);
                // Products of two format values are exact in f64 (man <= 20). The exact-sum
                // variant also needs every sum exact: products on the format's grid and
                // in its range, and a format whose grid spans few enough bits.
                let grid = 2f64.powi(ff.emin() - ff.man_bits as i32);
                let on_grid = ap.iter().take(kn * TILE_ROWS).all(|x| {
                    bp.iter().all(|y| {
                        let p = x * y;
                        p.is_finite() && (p / grid).fract() == 0.0 && p.abs() < 2f64.powi(ff.emax() + 1)
                    })
                });
                for exact in [false, true] {
                    if exact && !(on_grid && ff.emax() + 2 - ff.emin() + ff.man_bits as i32 <= 53) {
                        continue;
                    }
                    exact_runs += exact as usize;
                    match tile_both(f, mode, rbits, nr, &acc, &ap, &bp, kn, e0s, steps, t0, exact, ff.man_bits as i32 + 1) {
                        None => declined += 1,
                        Some((got, want, quiet)) => {
                            ran += 1;
                            quiet_runs += quiet as usize;
                            for (idx, (x, y)) in got.iter().zip(&want).enumerate().take(nr * 8) {
                                assert!(x.to_bits() == y.to_bits(), "{f:?} {mode:?} rbits {rbits} rep {rep} [{idx}]: {x:e} vs {y:e}; acc {:?} ap {:?} bp {:?}", acc[idx], (0..kn).map(|kk| ap[kk * TILE_ROWS + idx / 8]).collect::<Vec<_>>(), (0..kn).map(|kk| bp[kk * 8 + idx % 8]).collect::<Vec<_>>());
                            }
                        }
                    }
                }
            }
        }
    }
    if crate::convert::detected_isa() >= crate::convert::Isa::Avx2 {
        assert!(ran > 300 && declined > 20 && exact_runs > 30 && quiet_runs > 100, "ran {ran}, declined {declined}, exact {exact_runs}, quiet {quiet_runs}");
        // tile_both compared the stochastic tile toward zero wherever it ran.
        let sr = super::emulate::testing::SR_TILES.load(std::sync::atomic::Ordering::Relaxed);
        assert!(sr > 200, "the stochastic tile toward zero ran {sr} times");
    }
}

/// A tile's sums are claimed exact from its values ([`Fast::exact_ok`]) only
/// when every sum of its steps is: accumulators and products over wide and
/// narrow exponent spreads, zeros, values near the largest, every mode.
#[test]
fn exact_claim_from_values_holds() {
    let _settings = crate::settings_read();
    use super::emulate::testing::exact_claim;
    let mut g = Lcg(71);
    let mut fmts = tile_formats();
    fmts.push(Format::Float(FLOAT32));
    let (mut claimed, mut total) = (0, 0);
    for f in fmts {
        let q = |x: f64| f.decode(f.encode(x, &RoundOpts::new(Mode::NearestEven), 0));
        // Inputs of 8 bits (fp8 and bf16 products, f64-exact).
        let q8 = |x: f64| {
            let e = x.abs().log2().floor();
            (x * 2f64.powf(7.0 - e)).round() * 2f64.powf(e - 7.0)
        };
        for mode in [Mode::NearestEven, Mode::TowardZero, Mode::Up, Mode::Odd] {
            for rep in 0..300 {
                let kn = 1 + (g.next() % 64) as usize;
                let spread = [2, 8, 20, 40][rep % 4];
                // Accumulators from far below the products to above them.
                let e = (g.next() % 50) as i32 - 40;
                let acc: Vec<f64> = (0..8).map(|_| if g.next().is_multiple_of(4) { 0.0 } else { q(g.unit() * 2f64.powi(e + (g.next() % 6) as i32)) }).collect();
                let val = |g: &mut Lcg| {
                    let v = q8((g.unit() + 0.01) * 2f64.powi(-((g.next() % spread) as i32)));
                    if g.next().is_multiple_of(7) { 0.0 } else if g.next().is_multiple_of(2) { -v } else { v }
                };
                let ap: Vec<f64> = (0..kn).map(|_| val(&mut g)).collect();
                let bp: Vec<f64> = (0..kn * 8).map(|_| val(&mut g)).collect();
                let (claim, all) = exact_claim(f, mode, &acc, &ap, &bp, kn, 8);
                assert!(!claim || all, "{f:?} {mode:?} rep {rep}: claimed exact, but a sum is not; acc {acc:?} ap {ap:?} bp {bp:?}");
                claimed += claim as usize;
                total += 1;
            }
        }
    }
    // The claim is useful: it holds for many tiles.
    assert!(claimed > total / 8, "claimed {claimed} of {total}");
}

/// Stochastic rounding into float32 with 32 random bits: f64 keeps 29 bits
/// below the unit, so the tile shifts the random word right by 3, and the
/// decision must stay that of [`Fast::round`] (the word against the remainder
/// of the sum rounded to odd, scaled by 8) where the sum is inexact in f64. A
/// sum `1 + p` whose remainder is `8F + eps` (in units of 2^-32 of the unit,
/// 0 < eps < 1) for a random word `8F + r` with F even: rounded to odd, the
/// remainder is F + 1 at 29 bits, and both round up.
#[test]
fn stochastic_float32_tile_decides_as_the_scalar_path() {
    let _settings = crate::settings_read();
    use super::emulate::testing::{tile_both, TILE_ROWS};
    if crate::convert::detected_isa() < crate::convert::Isa::Avx2 {
        return;
    }
    // tile_both's words: element (e, 0) at step 0 of a StepRand of 1 step.
    let words = crate::round::StepRand::new(SeedKey::from_seed(7), 1);
    let mut checked = 0;
    for e in 0..4000u64 {
        let rand = words.bits(e as usize, 0, 0, 32);
        if (rand >> 3) & 1 != 0 {
            continue;
        }
        // p = a*b*2^-69 with a*b in (X*2^14, (X+1)*2^14), X = 8F: remainder p*2^55 in (X, X+1).
        let x = (rand >> 3) << 3;
        let target = (x as u128) << 14;
        let Some((a, b)) = ((1u128 << 23)..(1u128 << 24)).find_map(|a| {
            let b = target / a + 1;
            (b < (1 << 24) && a * b - target < (1 << 14)).then_some((a, b))
        }) else {
            continue;
        };
        let acc = vec![1.0f64; TILE_ROWS * 8];
        let mut ap = vec![0.0f64; TILE_ROWS];
        ap[0] = a as f64 * 2f64.powi(-40);
        let mut bp = vec![0.0f64; 8];
        bp[0] = b as f64 * 2f64.powi(-29);
        let e0s = [e, e + 100, e + 200, e + 300];
        let (got, want, _) = tile_both(Format::Float(FLOAT32), Mode::Stochastic, 32, 1, &acc, &ap, &bp, 1, e0s, 1, 0, false, 24).expect("the tile runs");
        assert_eq!(want[0], 1.0 + 2f64.powi(-23), "the construction: element {e}, word {rand:#x}");
        assert_eq!(got[0].to_bits(), want[0].to_bits(), "element {e}, word {rand:#x}");
        checked += 1;
        if checked == 20 {
            break;
        }
    }
    assert_eq!(checked, 20);
}

/// The register tile without watching its sums ([`tile_both`] runs it whenever
/// `quiet_ok` allows): sums in the subnormal range, on and off the format's
/// grid, and sums near the largest value.
#[test]
fn register_tile_untracked_edges() {
    let _settings = crate::settings_read();
    use super::emulate::testing::{tile_both, TILE_ROWS};
    let mut g = Lcg(91);
    let mut quiet_runs = [0usize; 3];
    for f in tile_formats() {
        let Format::Float(ff) = f else { unreachable!() };
        let q = |x: f64| f.decode(f.encode(x, &RoundOpts::new(Mode::NearestEven), 0));
        let (grid, top) = (2f64.powi(ff.emin() - ff.man_bits as i32), ff.max_value());
        for mode in Mode::ALL {
            for rep in 0..60 {
                let case = rep % 3;
                let nr = 1 + rep % TILE_ROWS;
                let kn = 1 + (g.next() % 12) as usize;
                let sub = |g: &mut Lcg| q(g.unit() * 2f64.powi(ff.emin()));
                let acc: Vec<f64> = (0..TILE_ROWS * 8)
                    .map(|_| match case {
                        2 => q(top * (0.5 + 0.5 * g.unit().abs()) * if g.next().is_multiple_of(2) { 1.0 } else { -1.0 }),
                        _ => sub(&mut g),
                    })
                    .collect();
                let ap: Vec<f64> = (0..kn * TILE_ROWS)
                    .map(|_| match case {
                        // Halves and quarters put products below the grid.
                        1 => [0.5, 0.25, 1.0, -0.75][(g.next() % 4) as usize],
                        _ => [1.0, -1.0, 2.0, 3.0][(g.next() % 4) as usize],
                    })
                    .collect();
                let bp: Vec<f64> = (0..kn * 8)
                    .map(|_| match case {
                        2 => q(top * 2f64.powi(-((g.next() % 6) as i32)) * g.unit()),
                        // Zero products keep subnormal accumulators where they are; the
                        // others are no smaller than the bounds of quiet_ok allow.
                        0 if !g.next().is_multiple_of(4) => 0.0,
                        0 => q(2f64.powi(ff.emin() + ff.man_bits as i32 + (g.next() % 4) as i32) * (1.0 + g.unit().abs() / 2.0)),
                        _ => {
                            let v = sub(&mut g);
                            if v == 0.0 { grid } else { v }
                        }
                    })
                    .collect();
                let e0s = std::array::from_fn(|r| 1000 + r as u64 * 8);
                // tile_both checks the unwatched tile against the scalar path whenever
                // quiet_ok allows it; None: neither tile ran.
                if let Some((got, want, quiet)) = tile_both(f, mode, 32, nr, &acc, &ap, &bp, kn, e0s, 64, 3, true, ff.man_bits as i32 + 1) {
                    assert!(got.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()), "{f:?} {mode:?}");
                    quiet_runs[case] += quiet as usize;
                }
            }
        }
    }
    if crate::convert::detected_isa() >= crate::convert::Isa::Avx2 {
        // Subnormal sums on the grid and small accumulators near the top run unwatched.
        assert!(quiet_runs[0] > 50, "{quiet_runs:?}");
    }
}

/// The arithmetic posit16 decoder equals `Format::decode` for every code of
/// posit<16, es>, es = 0..=3 (NaR as NaN).
#[test]
fn posit16_decoder_every_code() {
    let _settings = crate::settings_read();
    for es in 0..=3 {
        let f = crate::format::PositFormat::new(16, es).unwrap();
        for c in 0..=u16::MAX {
            let got = super::posit16_to_f32(c, es);
            let want = f.decode(c as u64);
            assert!(got as f64 == want || (got.is_nan() && want.is_nan()), "es {es} code {c:#06x}: {got:e} vs {want:e}");
            assert!(got.to_bits() != 0x8000_0000, "es {es} code {c:#06x}: negative zero");
        }
        // The 8-lane decoder of the packing, on every code (odd length: the scalar tail too).
        #[cfg(target_arch = "x86_64")]
        if crate::convert::detected_isa() >= crate::convert::Isa::Avx2 {
            let codes: Vec<u16> = (0..=u16::MAX).chain([0x8000, 0x0001, 0x7fff]).collect();
            let mut out = vec![0f32; codes.len()];
            // SAFETY: avx2 was detected; both buffers hold codes.len() values.
            unsafe { super::kernels::posit16_run_avx2(codes.as_ptr(), codes.len(), es, out.as_mut_ptr()) };
            for (&c, &v) in codes.iter().zip(&out) {
                assert_eq!(v.to_bits(), super::posit16_to_f32(c, es).to_bits(), "es {es} code {c:#06x}");
            }
        }
    }
}

/// Emulated products written as float32 equal the float64 results (which are
/// exact in float32 when the accumulators fit in it), through the fp16/bf16
/// tiles and the f64 lanes alike; accumulators wider than float32 refuse a
/// float32 output.
#[test]
fn emulated_float32_output_matches_float64() {
    let _settings = crate::settings_read();
    let mut g = Lcg(5);
    let (m, n, k) = (37, 29, 150);
    // bf16 codes of values in (-4, 4).
    let codes = |g: &mut Lcg, len: usize| -> Vec<u16> { (0..len).map(|_| (((g.unit() * 4.0) as f32).to_bits() >> 16) as u16).collect() };
    let (av, bv) = (codes(&mut g, m * k), codes(&mut g, k * n));
    let f = Some(Format::Float(BFLOAT16));
    // SAFETY: views inside the vectors.
    let (a, b) = unsafe {
        (
            Operand::from_raw(av.as_ptr() as *const u8, Storage::U16, f, m, k, k as isize, 1, "a").unwrap(),
            Operand::from_raw(bv.as_ptr() as *const u8, Storage::U16, f, k, n, n as isize, 1, "b").unwrap(),
        )
    };
    let e5m2 = Format::Float(FLOAT8_E5M2);
    let f69 = Format::Float(FloatFormat::new(6, 9, None, true, crate::format::NanPolicy::Ieee, true).unwrap());
    let cases = [
        (Format::Float(FLOAT16), None, Mode::NearestEven),
        (Format::Float(BFLOAT16), Some((16, Format::Float(FLOAT32))), Mode::TowardZero),
        (e5m2, None, Mode::Stochastic),
        (f69, Some((8, Format::Float(FLOAT16))), Mode::Up),
    ];
    for (fmt, chunk, mode) in cases {
        let spec = AccumSpec { fmt, chunk, opts: RoundOpts::new(mode) };
        let (mut c64, mut c32) = (vec![0f64; m * n], vec![0f32; m * n]);
        // SAFETY: both hold m x n.
        matmul_emulated(&a, &b, unsafe { OutMat::from_raw(c64.as_mut_ptr(), m, n, n as isize, 1) }, &spec).unwrap();
        matmul_emulated(&a, &b, unsafe { OutMat::from_raw(c32.as_mut_ptr(), m, n, n as isize, 1) }, &spec).unwrap();
        for (x, y) in c64.iter().zip(&c32) {
            assert!(*x == *y as f64 || (x.is_nan() && y.is_nan()), "{fmt:?} {mode:?}: {x:e} vs {y:e}");
        }
    }
    let wide = AccumSpec { fmt: Format::Float(FLOAT64), chunk: None, opts: RoundOpts::new(Mode::NearestEven) };
    let mut c32 = vec![0f32; m * n];
    // SAFETY: c32 holds m x n.
    assert!(matmul_emulated(&a, &b, unsafe { OutMat::from_raw(c32.as_mut_ptr(), m, n, n as isize, 1) }, &wide).is_err());
    let narrow_then_wide = AccumSpec { fmt: Format::Float(FLOAT16), chunk: Some((4, Format::Float(FLOAT64))), opts: RoundOpts::new(Mode::NearestEven) };
    // SAFETY: as above.
    assert!(matmul_emulated(&a, &b, unsafe { OutMat::from_raw(c32.as_mut_ptr(), m, n, n as isize, 1) }, &narrow_then_wide).is_err());
}

/// `for_batch` runs every product once, small ones on the pool's threads with
/// one thread each (`serially`), and returns an error of a failing product; a
/// failing first product stops the batch before any other runs.
#[test]
fn for_batch_runs_each_product_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let _settings = crate::settings_write();
    let old = crate::parallel::num_threads();
    crate::parallel::set_num_threads(2).unwrap();
    for madds in [10, 1 << 30] {
        let hits: Vec<AtomicUsize> = (0..50).map(|_| AtomicUsize::new(0)).collect();
        let seen = AtomicUsize::new(0);
        super::for_batch(50, madds, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
            // Small products (after the first) see one thread; large ones the pool's two.
            let want = if madds < 1000 && i > 0 { 1 } else { 2 };
            assert_eq!(crate::parallel::num_threads(), want, "product {i}");
            seen.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        assert_eq!(seen.load(Ordering::Relaxed), 50);
        // Outside, the thread count is the pool's again.
        assert_eq!(crate::parallel::num_threads(), 2);
        let err = super::for_batch(50, madds, &|i| if i == 7 || i == 30 { Err(crate::Error::value(format!("product {i}"))) } else { Ok(()) });
        let msg = err.unwrap_err().to_string();
        assert!(msg.contains("product 7") || msg.contains("product 30"), "{msg}");
        let ran = AtomicUsize::new(0);
        let err = super::for_batch(50, madds, &|i| {
            ran.fetch_add(1, Ordering::Relaxed);
            if i == 0 { Err(crate::Error::value("first")) } else { Ok(()) }
        });
        assert!(err.is_err() && ran.load(Ordering::Relaxed) == 1);
    }
    crate::parallel::set_num_threads(old).unwrap();
}

/// (storage, format) of inputs of every f32 decoding: float32, bfloat16,
/// float16, e4m3fn (a table), posit16.
fn decodings() -> [(Storage, Option<Format>); 5] {
    [
        (Storage::F32, None),
        (Storage::U16, Some(Format::Float(BFLOAT16))),
        (Storage::U16, Some(Format::Float(FLOAT16))),
        (Storage::U8, Some(Format::Float(FLOAT8_E4M3FN))),
        (Storage::U16, Some(Format::Posit(POSIT16))),
    ]
}

/// Random codes of `len` elements of storage `st` (as bytes): with `specials`,
/// some infinities and NaNs among float32 values and any codes; without, finite
/// float32 values and codes with their top bits cleared (finite in every format).
fn random_codes(g: &mut Lcg, st: Storage, len: usize, specials: bool) -> Vec<u8> {
    match st {
        Storage::F32 => (0..len)
            .flat_map(|i| {
                let v = match g.next() % 97 {
                    0 if specials && i % 3 == 0 => f32::INFINITY,
                    1 if specials && i % 5 == 0 => f32::NAN,
                    _ => (g.unit() * 4.0) as f32,
                };
                v.to_ne_bytes()
            })
            .collect(),
        _ => (0..len * st.bytes()).map(|i| (g.next() >> 7) as u8 & if !specials && i % st.bytes() == st.bytes() - 1 { 0x3f } else { 0xff }).collect(),
    }
}

/// The small-product path ([`driver::small_f32`]) sums every element as the loop
/// nest does, bit for bit, for every input decoding, shape edge and stride, and
/// takes no product it cannot compute that way.
#[test]
fn small_products_match_the_loop_nest() {
    let _settings = crate::settings_read();
    if !simd() {
        return;
    }
    let mut g = Lcg(11);
    let kinds = decodings();
    let codes = |g: &mut Lcg, st: Storage, len: usize| random_codes(g, st, len, true);
    let mut taken = 0;
    for (ka, &(sa, fa)) in kinds.iter().enumerate() {
        let (sb, fb) = kinds[(ka + 1) % kinds.len()];
        for &(m, n, k) in &[(1, 1, 1), (3, 7, 2), (4, 8, 5), (5, 9, 64), (8, 16, 8), (9, 17, 33), (17, 24, 256), (6, 33, 7), (2, 64, 100), (13, 15, 31), (8, 8, 257), (128, 128, 128), (130, 128, 128)] {
            let av = codes(&mut g, sa, m * k);
            let bv = codes(&mut g, sb, k * n);
            for layout in 0..4 {
                // A row- or column-major; B row-major, its rows reversed (a negative
                // stride), or column-major; C row-major with padded rows, or transposed.
                let (ars, acs) = if layout % 2 == 0 { (k as isize, 1) } else { (1, m as isize) };
                // SAFETY: each view covers exactly the elements of its vector.
                let a = unsafe { Operand::from_raw(av.as_ptr(), sa, fa, m, k, ars, acs, "a").unwrap() };
                let b = unsafe {
                    match layout {
                        0 => Operand::from_raw(bv.as_ptr(), sb, fb, k, n, n as isize, 1, "b"),
                        1 => Operand::from_raw(bv.as_ptr().add((k - 1) * n * sb.bytes()), sb, fb, k, n, -(n as isize), 1, "b"),
                        _ => Operand::from_raw(bv.as_ptr(), sb, fb, k, n, 1, k as isize, "b"),
                    }
                    .unwrap()
                };
                let (rs, cs, len) = if layout < 3 { (n as isize + 3, 1, m * (n + 3)) } else { (1, m as isize, m * n) };
                let mut small = vec![-7f32; len];
                let mut nest = vec![-7f32; len];
                // SAFETY: both buffers hold the m x n matrix at these strides; simd() holds.
                let done = unsafe { driver::small_f32(&a, &b, OutMat::from_raw(small.as_mut_ptr(), m, n, rs, cs)) };
                driver::gemm(&kernels::F32Avx2, &a, &b, unsafe { OutMat::from_raw(nest.as_mut_ptr(), m, n, rs, cs) });
                let expect_taken = k <= 256 && m * n * k <= driver::SMALL_MADDS && m * k <= 1 << 14 && k * n.div_ceil(8) * 8 <= 1 << 14;
                assert_eq!(done, expect_taken, "{m}x{n}x{k}");
                if !done {
                    assert!(small.iter().all(|&x| x == -7.0), "{m}x{n}x{k}: wrote without taking the product");
                    continue;
                }
                taken += 1;
                for (q, (x, y)) in small.iter().zip(&nest).enumerate() {
                    // (NaN payloads follow the FMA's operand order, which the compiler picks.)
                    assert!(x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan(), "{fa:?} x {fb:?} {m}x{n}x{k} layout {layout}, element {q}: {x} vs {y}");
                }
            }
        }
    }
    assert!(taken >= 5 * 10 * 4, "{taken}");
}

/// The operands and C's strides of a vector-path test case (m x k x n, the
/// elements of A and B in `av` and `bv`): layout 0 both row-major, 1 both
/// column-major, 2 B's rows in reverse, 3 A reversed both ways (B row-major).
/// C is `(rs, cs, len)`: every other column of rows 2n apart in layouts 0 and
/// 2, column-major in 1 and 3.
#[allow(clippy::too_many_arguments)]
fn vector_case(av: &[u8], (sa, fa): (Storage, Option<Format>), bv: &[u8], (sb, fb): (Storage, Option<Format>), m: usize, k: usize, n: usize, layout: usize) -> (Operand, Operand, (isize, isize, usize)) {
    assert!(av.len() >= m * k * sa.bytes() && bv.len() >= k * n * sb.bytes());
    // SAFETY: each view covers the first m*k (k*n) elements of its vector (asserted).
    let (a, b) = unsafe {
        let a = match layout {
            0 | 2 => Operand::from_raw(av.as_ptr(), sa, fa, m, k, k as isize, 1, "a"),
            1 => Operand::from_raw(av.as_ptr(), sa, fa, m, k, 1, m as isize, "a"),
            _ => Operand::from_raw(av.as_ptr().add((m * k - 1) * sa.bytes()), sa, fa, m, k, -(k as isize), -1, "a"),
        }
        .unwrap();
        let b = match layout {
            0 | 3 => Operand::from_raw(bv.as_ptr(), sb, fb, k, n, n as isize, 1, "b"),
            1 => Operand::from_raw(bv.as_ptr(), sb, fb, k, n, 1, k as isize, "b"),
            _ => Operand::from_raw(bv.as_ptr().add((k - 1) * n * sb.bytes()), sb, fb, k, n, -(n as isize), 1, "b"),
        }
        .unwrap();
        (a, b)
    };
    let c = if layout.is_multiple_of(2) { (n as isize * 2, 2, m * n * 2) } else { (1, m as isize, m * n) };
    (a, b, c)
}

/// A vector path (`fast`: [`driver::gemv_f32`], [`f64v::gemv_f64`]) and the
/// loop nest (`kern`) on `a @ b`, each into a buffer of -7s holding C at
/// `(rs, cs, len)` (as [`vector_case`] gives them); where `fast` took the
/// product, every element has the loop nest's bits (a NaN for a NaN; `what`
/// names the case in the message). Returns whether it took it.
fn against_nest<K: kernels::Kernel>(fast: unsafe fn(&Operand, &Operand, OutMat<K::C>) -> bool, kern: &K, a: &Operand, b: &Operand, (rs, cs, len): (isize, isize, usize), what: &str) -> bool
where
    K::C: From<i8> + Into<f64> + std::fmt::Display,
{
    let (m, n) = (a.rows, b.cols);
    let mut got = vec![K::C::from(-7); len];
    let mut nest = vec![K::C::from(-7); len];
    // SAFETY: both buffers hold the m x n matrix at these strides (the caller's
    // case); simd() holds where the tests call it.
    let done = unsafe { fast(a, b, OutMat::from_raw(got.as_mut_ptr(), m, n, rs, cs)) };
    driver::gemm(kern, a, b, unsafe { OutMat::from_raw(nest.as_mut_ptr(), m, n, rs, cs) });
    if done {
        for (q, (&x, &y)) in got.iter().zip(&nest).enumerate() {
            // (Widened exactly: equal f64 bits are equal bits of the element.)
            let (xd, yd): (f64, f64) = (x.into(), y.into());
            assert!(xd.to_bits() == yd.to_bits() || xd.is_nan() && yd.is_nan(), "{what}, element {q}: {x} vs {y}");
        }
    }
    done
}

/// The vector-matrix and matrix-vector paths ([`driver::gemv_f32`]: rows of B
/// streamed, columns dotted 8 at a time, or strips) sum every element as the
/// loop nest does, bit for bit: every decoding, B and A in either layout,
/// strided and reversed, depths over several blocks with tails, C strided, and
/// a product large enough to split over the threads.
#[test]
fn vector_products_match_the_loop_nest() {
    let _settings = crate::settings_read();
    if !simd() {
        return;
    }
    let mut g = Lcg(12);
    let kinds: Vec<_> = decodings().into_iter().chain([(Storage::U8, Some(Format::Float(FLOAT8_E5M2)))]).collect();
    // fp8 codes of every sign and exponent; e4m3fn's NaN codes (which send a block
    // strip by strip) only in layout 3, where every input has its specials.
    let codes = |g: &mut Lcg, st: Storage, len: usize, specials: bool| match st {
        Storage::U8 => (0..len).map(|_| (g.next() >> 9) as u8).map(|x| if !specials && x & 0x7f == 0x7f { x ^ 1 } else { x }).collect(),
        _ => random_codes(g, st, len, specials),
    };
    let mut cases = 0;
    // Products of 2 to 6 rows too, taken where B's rows are contiguous (not in
    // layout 1) up to driver::gemv_rows of its decoding (2, or 6 for fp8 codes
    // and float32),
    // and where its columns are (layout 1) up to driver::GEMV_ROWS (8);
    // 2 x 1024 x 2100 and 5 x 1024 x 900 split over the threads; 1 x 300 x
    // 4200 streams eight rows of B at a time, its last block of 44 steps
    // ending in single steps.
    assert_eq!(driver::GEMV_ROWS, 8);
    let shapes = [(1, 1, 1), (1, 7, 9), (1, 300, 33), (1, 513, 1100), (9, 300, 1), (1030, 257, 1), (1, 1024, 4100), (4100, 1024, 1), (1, 5, 1), (1, 300, 4200)];
    let rows = [(2, 300, 33), (2, 7, 9), (2, 513, 700), (2, 1024, 2100), (2, 260, 13), (2, 3, 200), (3, 300, 70), (4, 257, 33), (5, 1024, 900), (6, 40, 300), (7, 300, 33), (8, 513, 70)];
    let mut skipped = 0;
    for &(m, k, n) in shapes.iter().chain(&rows) {
        for (ka, &(sa, fa)) in kinds.iter().enumerate() {
            let (sb, fb) = kinds[(ka + 2) % kinds.len()];
            let (sb, fb) = if ka % 2 == 0 { (sa, fa) } else { (sb, fb) };
            let (av0, bv0) = (codes(&mut g, sa, m * k, false), codes(&mut g, sb, k * n, false));
            let (av1, bv1) = (codes(&mut g, sa, m * k, true), codes(&mut g, sb, k * n, true));
            for layout in 0..4 {
                let (av, bv) = if layout == 3 { (&av1, &bv1) } else { (&av0, &bv0) };
                let (a, b, c) = vector_case(av, (sa, fa), bv, (sb, fb), m, k, n, layout);
                let done = against_nest(driver::gemv_f32, &kernels::F32Avx2, &a, &b, c, &format!("{fa:?} x {fb:?} {m}x{k}x{n} layout {layout}"));
                let cap = |code| if layout == 1 { driver::GEMV_ROWS } else { driver::gemv_rows(code) };
                let taken = m == 1 || n == 1 || kernels::row_code(&b.dec, b.fmt).is_some_and(|code| m <= cap(code));
                assert_eq!(done, taken, "{m}x{k}x{n} layout {layout}");
                if !done {
                    skipped += 1;
                    continue;
                }
                cases += 1;
            }
        }
    }
    assert_eq!(cases + skipped, 22 * 6 * 4);
    // (Products of more than 2 rows: taken for the pairs whose B holds fp8 codes
    // or float32.)
    let many = |(st, f): (Storage, Option<Format>)| st == Storage::U8 && kernels::fp8_kind(f).is_some() || st == Storage::F32;
    let many_b = (0..kinds.len()).filter(|&ka| many(if ka % 2 == 0 { kinds[ka] } else { kinds[(ka + 2) % kinds.len()] })).count();
    assert!(many_b >= 3);
    // (Products of 2 to 8 rows with B's columns contiguous, layout 1: taken for
    // the 5 kinds with a row code; of 7 and 8 rows only those.)
    assert_eq!(cases, 10 * 6 * 4 + 6 * 5 * 4 + 4 * many_b * 3 + 4 * 5 + 2 * 5);
    // e4m3fn's decoding takes A's block times 2^8: a block whose A values would
    // overflow so goes strip by strip (2^125 times e4m3fn's small values is
    // finite), as does one holding a NaN code (read as 1.875 by the decoding);
    // along rows and along columns.
    let k = 40;
    // B's codes (k x 20), one of them an e4m3fn NaN.
    let codes = |nan: bool| -> Vec<u8> { (0..k * 20).map(|q| if nan && q == 77 { 0xff } else { [0x01u8, 0x88, 0x12, 0x30][q % 4] }).collect() };
    // gemv_f32 takes a @ b, with the loop nest's bits and `nans` NaNs.
    let matches_nest = |a: &Operand, b: &Operand, nans: usize| {
        let (m, n) = (a.rows, b.cols);
        let mut fast = vec![0f32; m * n];
        let mut nest = vec![0f32; m * n];
        // SAFETY: both hold the m x n values of C; simd() holds.
        assert!(unsafe { driver::gemv_f32(a, b, OutMat::from_raw(fast.as_mut_ptr(), m, n, n as isize, 1)) });
        driver::gemm(&kernels::F32Avx2, a, b, unsafe { OutMat::from_raw(nest.as_mut_ptr(), m, n, n as isize, 1) });
        assert!(fast.iter().filter(|x| x.is_nan()).count() == nans && fast.iter().zip(&nest).all(|(x, y)| x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan()), "{fast:?} vs {nest:?}");
    };
    for (rows, (rs, cs), nan) in [(false, (20, 1), false), (true, (1, k as isize), false), (false, (20, 1), true), (true, (1, k as isize), true)] {
        let av: Vec<f32> = (0..k).map(|q| if q == 5 && !nan { 2f32.powi(125) } else { 1.5 }).collect();
        let bv = codes(nan);
        // SAFETY: the views cover their vectors.
        let (a, b) = unsafe { (op_f32(&av, 1, k, k as isize, 1), Operand::from_raw(bv.as_ptr(), Storage::U8, Some(Format::Float(FLOAT8_E4M3FN)), k, 20, rs, cs, "b").unwrap()) };
        let (a, b) = if rows { (b.t(), a.t()) } else { (a, b) };
        matches_nest(&a, &b, usize::from(nan));
    }
    // The same with two rows of A (a row-major e4m3fn B): one row's 2^125
    // sends the block strip by strip for both rows.
    for nan in [false, true] {
        let av: Vec<f32> = (0..2 * k).map(|q| if q == k + 5 && !nan { 2f32.powi(125) } else { 0.5 + q as f32 / 64.0 }).collect();
        let bv = codes(nan);
        // SAFETY: the views cover their vectors.
        let (a, b) = unsafe { (op_f32(&av, 2, k, k as isize, 1), Operand::from_raw(bv.as_ptr(), Storage::U8, Some(Format::Float(FLOAT8_E4M3FN)), k, 20, 20, 1, "b").unwrap()) };
        matches_nest(&a, &b, 2 * usize::from(nan));
    }
    // Other shapes are not taken: more rows than gemv_rows (6 for float32 and
    // e5m2) with B's rows contiguous, or GEMV_ROWS (8) with its columns, against
    // more columns than GEMV_ROWS (9), or a B with neither its rows nor its
    // columns contiguous times an A with neither.
    let v = vec![0f32; 128];
    let (r7, r9) = (driver::gemv_rows(kernels::ROW_F32) + 1, driver::GEMV_ROWS + 1);
    assert_eq!((r7, r9), (7, 9));
    let mut c = [0f32; 96];
    let (a, b) = (op_f32(&v, r7, 8, 8, 1), op_f32(&v, 8, r9, r9 as isize, 1));
    // SAFETY: c holds r7 x r9.
    assert!(!unsafe { driver::gemv_f32(&a, &b, OutMat::from_raw(c.as_mut_ptr(), r7, r9, r9 as isize, 1)) });
    let b8 = [0x3cu8; 72];
    // SAFETY: the view covers its vector (8 x r9 codes).
    let b = unsafe { Operand::from_raw(b8.as_ptr(), Storage::U8, Some(Format::Float(FLOAT8_E5M2)), 8, r9, r9 as isize, 1, "b").unwrap() };
    // SAFETY: c holds r7 x r9.
    assert!(!unsafe { driver::gemv_f32(&a, &b, OutMat::from_raw(c.as_mut_ptr(), r7, r9, r9 as isize, 1)) });
    // SAFETY: c holds r9 x r9.
    assert!(!unsafe { driver::gemv_f32(&op_f32(&v, r9, 8, 8, 1), &op_f32(&v, 8, r9, 1, 8), OutMat::from_raw(c.as_mut_ptr(), r9, r9, r9 as isize, 1)) });
    let (a, b) = (op_f32(&v, 2, 8, 16, 2), op_f32(&v, 8, 2, 2, 32));
    // SAFETY: c holds 2 x 2.
    assert!(!unsafe { driver::gemv_f32(&a, &b, OutMat::from_raw(c.as_mut_ptr(), 2, 2, 2, 1)) });
}

/// A product of a few columns of B (2 to 8) against more
/// rows of A runs transposed through the vector paths (the rows of the
/// transposed product's A, B's columns; its B, A's rows or columns) with the
/// loop nest's bits, where A's rows are contiguous (column dots) or its
/// columns are (row streaming, up to `gemv_rows` columns); not with A
/// reversed both ways. float32 accumulation from float32, bf16, fp16, e4m3fn,
/// float8_e5m2fnuz and posit16 (no row code: not taken) A; float64 from
/// float64, float32, bf16 and posit32 (not taken).
#[test]
fn few_columns_run_transposed() {
    let _settings = crate::settings_read();
    if !simd() {
        return;
    }
    let mut g = Lcg(47);
    let kinds32 = [
        (Storage::F32, None),
        (Storage::U16, Some(Format::Float(BFLOAT16))),
        (Storage::U16, Some(Format::Float(FLOAT16))),
        (Storage::U8, Some(Format::Float(FLOAT8_E4M3FN))),
        (Storage::U8, Some(Format::Float(FLOAT8_E5M2FNUZ))),
        (Storage::U16, Some(Format::Posit(POSIT16))),
    ];
    let kinds64 = [(Storage::F64, None), (Storage::F32, None), (Storage::U16, Some(Format::Float(BFLOAT16))), (Storage::U32, Some(Format::Posit(POSIT32)))];
    let codes = |g: &mut Lcg, st: Storage, len: usize| match st {
        Storage::F64 => (0..len).flat_map(|_| (g.unit() * 3.0).to_ne_bytes()).collect(),
        // (fp8 codes without specials: none of the formats' NaN and infinities.)
        Storage::U8 => (0..len).map(|_| (g.next() >> 9) as u8 & 0x77).collect(),
        _ => random_codes(g, st, len, false),
    };
    let (mut cases, mut taken) = (0, 0);
    for &(m, k, n) in &[(9, 300, 2), (70, 513, 3), (33, 1024, 4), (1030, 257, 6), (260, 40, 5), (50, 300, 8), (12, 7, 2)] {
        for (wide, kinds) in [(false, &kinds32[..]), (true, &kinds64[..])] {
            for &(st, f) in kinds {
                let (av, bv) = (codes(&mut g, st, m * k), codes(&mut g, st, k * n));
                for layout in 0..4 {
                    let (a, b, c) = vector_case(&av, (st, f), &bv, (st, f), m, k, n, layout);
                    let expect = layout != 3
                        && if wide {
                            f64v::code(&a.dec).is_some()
                        } else {
                            kernels::row_code(&a.dec, a.fmt).is_some_and(|code| layout != 1 || n <= driver::gemv_rows(code))
                        };
                    let what = format!("{f:?} {m}x{k}x{n} layout {layout}");
                    let done = if wide {
                        against_nest(f64v::gemv_f64, &kernels::F64Avx2, &a, &b, c, &what)
                    } else {
                        against_nest(driver::gemv_f32, &kernels::F32Avx2, &a, &b, c, &what)
                    };
                    assert_eq!(done, expect, "{what}");
                    cases += 1;
                    taken += usize::from(done);
                }
            }
        }
    }
    assert_eq!(cases, 7 * (6 + 4) * 4);
    assert!(taken >= cases / 2, "{taken} of {cases}");
}

/// [`kernels::Place8`] decodes every code of every 8-bit float format with
/// subnormals whose values are all f32 values (every exponent width, bias and
/// NaN policy; float8_e5m2 and float8_e4m3fn have codes of their own) as the
/// format does, bit for bit, and its special codes are exactly the NaNs and
/// infinities.
#[test]
fn placed_fp8_codes_decode_exactly() {
    use crate::format::NanPolicy;
    let mut taken = 0;
    for e in 1..=7u32 {
        for bias in -2..=160 {
            for nan in [NanPolicy::Ieee, NanPolicy::Fn, NanPolicy::Fnuz, NanPolicy::None] {
                for inf in [true, false] {
                    let Ok(f) = FloatFormat::new(e, 7 - e, Some(bias), inf, nan, true) else { continue };
                    let (ff, fmt) = (Format::Float(f), Some(Format::Float(f)));
                    let dec = Dec::Lut8(table(&ff));
                    let own = f == FLOAT8_E5M2 || f == FLOAT8_E4M3FN;
                    // Placed where every value is an f32 and the scale to the value
                    // (from float16, or from f32 for 5 exponent bits without IEEE
                    // specials and more) an f32 normal.
                    let wider = if e <= 4 || e == 5 && nan == NanPolicy::Ieee { 15 } else { 127 };
                    let placed = !own && ff.fits_f32() && (-126..=127).contains(&(wider - bias));
                    let Some(p) = kernels::place8(&dec, fmt) else {
                        assert!(!placed, "{f:?} not placed");
                        continue;
                    };
                    assert!(placed, "{f:?}");
                    assert_eq!(kernels::row_code(&dec, fmt), Some(kernels::ROW_FP8));
                    let (smask, sval) = p.specials();
                    for c in 0..=255u8 {
                        let v = f.decode(c as u64);
                        assert_eq!(c & smask == sval, !v.is_finite(), "{f:?} code {c:#x}");
                        if v.is_finite() {
                            assert_eq!(kernels::place8_one(&p, c).to_bits(), (v as f32).to_bits(), "{f:?} code {c:#x}");
                        }
                    }
                    taken += 1;
                }
            }
        }
    }
    assert!(taken > 1000, "{taken}");
    for f in [FLOAT8_E4M3FNUZ, FLOAT8_E5M2FNUZ, FLOAT8_E4M3] {
        assert!(kernels::place8(&Dec::Lut8(table(&Format::Float(f))), Some(Format::Float(f))).is_some(), "{f:?}");
    }
}

/// The vector paths read the codes of 8-bit float formats other than e5m2 and
/// e4m3fn in registers ([`kernels::ROW_FP8`]) with the loop nest's bits:
/// float8_e4m3fnuz, float8_e5m2fnuz, float8_e4m3 (IEEE) and a FloatFormat(3,
/// 4) of bias 1; rows of B streamed (1 to 6 rows of A, 8 rows of B at a
/// time, tails), columns dotted (the groups skewed where columns lie 4 KiB
/// apart), B reversed, and special codes (NaN, infinities) along rows and
/// along columns, which send a block strip by strip.
#[test]
fn placed_fp8_vector_products_match_the_loop_nest() {
    let _settings = crate::settings_read();
    if !simd() {
        return;
    }
    let mut g = Lcg(43);
    let custom = FloatFormat::new(3, 4, Some(1), true, crate::format::NanPolicy::Ieee, true).unwrap();
    let f32k = (Storage::F32, None);
    let shapes = [(1, 7, 9), (1, 300, 33), (1, 513, 1100), (1, 300, 4200), (300, 4096, 1), (2, 300, 33), (3, 513, 70), (4, 257, 33), (6, 40, 300), (1, 256, 40)];
    let mut cases = 0;
    for f in [FLOAT8_E4M3FNUZ, FLOAT8_E5M2FNUZ, FLOAT8_E4M3, custom] {
        let fb = (Storage::U8, Some(Format::Float(f)));
        let (smask, sval) = kernels::place8(&Dec::Lut8(table(&Format::Float(f))), fb.1).unwrap().specials();
        for &(m, k, n) in &shapes {
            let av = random_codes(&mut g, Storage::F32, m * k, false);
            // Codes of every sign and exponent, the specials swapped for numbers
            // except in layout 3 (there about one in 60 is special).
            let raw: Vec<u8> = (0..k * n).map(|_| (g.next() >> 9) as u8).collect();
            let clean: Vec<u8> = raw.iter().map(|&c| if c & smask == sval { c ^ 0x40 } else { c }).collect();
            assert!(clean.iter().all(|&c| c & smask != sval));
            // (Layout 4: layout 1, B's columns contiguous, with special codes.)
            for layout in 0..5 {
                let bv = if layout >= 3 { &raw } else { &clean };
                let (a, b, c) = vector_case(&av, f32k, bv, fb, m, k, n, if layout == 4 { 1 } else { layout });
                let what = format!("{f:?} {m}x{k}x{n} layout {layout}");
                assert!(against_nest(driver::gemv_f32, &kernels::F32Avx2, &a, &b, c, &what), "{what}");
                cases += 1;
            }
        }
    }
    assert_eq!(cases, 4 * 10 * 5);
    // Columns 4 KiB apart (the second group 64 steps behind), with and without a
    // NaN code (0x80, float8_e4m3fnuz's), the last one in the last column.
    let k = 4096;
    let av: Vec<f32> = (0..k).map(|_| g.unit() as f32).collect();
    for nan in [false, true] {
        let mut bv: Vec<u8> = (0..k * 20).map(|_| (g.next() >> 9) as u8 & 0x7f).collect();
        if nan {
            bv[k * 20 - 3] = 0x80;
        }
        // SAFETY: the views cover their vectors.
        let (a, b) = unsafe { (op_f32(&av, 1, k, k as isize, 1), Operand::from_raw(bv.as_ptr(), Storage::U8, Some(Format::Float(FLOAT8_E4M3FNUZ)), k, 20, 1, k as isize, "b").unwrap()) };
        let (mut fast, mut nest) = (vec![0f32; 20], vec![0f32; 20]);
        // SAFETY: both hold the 1 x 20 values of C; simd() holds.
        assert!(unsafe { driver::gemv_f32(&a, &b, OutMat::from_raw(fast.as_mut_ptr(), 1, 20, 20, 1)) });
        driver::gemm(&kernels::F32Avx2, &a, &b, unsafe { OutMat::from_raw(nest.as_mut_ptr(), 1, 20, 20, 1) });
        assert_eq!(fast.iter().filter(|x| x.is_nan()).count(), usize::from(nan));
        assert!(fast.iter().zip(&nest).all(|(x, y)| x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan()), "{fast:?} vs {nest:?}");
    }
}

/// The f64 vector paths ([`f64v::gemv_f64`]: rows of B streamed, columns
/// dotted 8 or 4 at a time, or strips) sum every element as the f64 loop
/// nest does, bit for bit: B stored as float64, float32, bf16 and fp16 (read
/// in registers), e4m3fn and posit32 (packed), B and A in either layout,
/// strided and reversed, depths over several blocks with tails, 2 to 8 rows,
/// C strided, columns a multiple of 4 KiB apart (the groups run skewed), and
/// products large enough to split over the threads.
#[test]
fn f64_vector_products_match_the_loop_nest() {
    let _settings = crate::settings_read();
    if !simd() {
        return;
    }
    let mut g = Lcg(41);
    let kinds = [
        (Storage::F64, None),
        (Storage::F32, None),
        (Storage::U16, Some(Format::Float(BFLOAT16))),
        (Storage::U16, Some(Format::Float(FLOAT16))),
        (Storage::U8, Some(Format::Float(FLOAT8_E4M3FN))),
        (Storage::U32, Some(Format::Posit(POSIT32))),
    ];
    let codes = |g: &mut Lcg, st: Storage, len: usize, specials: bool| match st {
        Storage::F64 => (0..len).flat_map(|i| if specials && i % 41 == 3 { f64::NAN } else { g.unit() * 3.0 }.to_ne_bytes()).collect(),
        _ => random_codes(g, st, len, specials),
    };
    assert_eq!(f64v::ROWS, 8);
    // (1, 512, 70) and (70, 512, 1): columns 4 KiB apart in layout 1 and run
    // transposed; (2, 1024, 40) in layout 1 too, two groups; (1, 300, 4200):
    // rows of B eight at a time, the last block of 44 steps ending in single steps.
    let shapes = [(1, 1, 1), (1, 7, 9), (1, 300, 33), (1, 513, 1100), (9, 300, 1), (1030, 257, 1), (1, 1024, 4100), (4100, 1024, 1), (1, 5, 1), (1, 512, 70), (70, 512, 1), (1, 300, 4200)];
    let rows = [(2, 300, 33), (2, 7, 9), (2, 1024, 40), (3, 513, 70), (4, 257, 33), (5, 1024, 900), (6, 40, 300), (6, 512, 37), (7, 300, 33), (8, 513, 70)];
    let (mut cases, mut skipped) = (0, 0);
    for &(m, k, n) in shapes.iter().chain(&rows) {
        for (ka, &(sa, fa)) in kinds.iter().enumerate() {
            let (sb, fb) = if ka % 2 == 0 { (sa, fa) } else { kinds[(ka + 2) % kinds.len()] };
            let (av0, bv0) = (codes(&mut g, sa, m * k, false), codes(&mut g, sb, k * n, false));
            let (av1, bv1) = (codes(&mut g, sa, m * k, true), codes(&mut g, sb, k * n, true));
            for layout in 0..4 {
                let (av, bv) = if layout == 3 { (&av1, &bv1) } else { (&av0, &bv0) };
                let (a, b, c) = vector_case(av, (sa, fa), bv, (sb, fb), m, k, n, layout);
                let done = against_nest(f64v::gemv_f64, &kernels::F64Avx2, &a, &b, c, &format!("{fa:?} x {fb:?} {m}x{k}x{n} layout {layout}"));
                let taken = m == 1 || n == 1 || f64v::code(&b.dec).is_some();
                assert_eq!(done, taken, "{m}x{k}x{n} layout {layout}");
                if !done {
                    skipped += 1;
                    continue;
                }
                cases += 1;
            }
        }
    }
    // Products of 2 to 6 rows are taken where B is read in registers (float64,
    // float32, bf16, fp16: 4 of the 6 pairs).
    let coded = (0..kinds.len()).filter(|&ka| {
        let (sb, fb) = if ka % 2 == 0 { kinds[ka] } else { kinds[(ka + 2) % kinds.len()] };
        sb == Storage::F64 || sb == Storage::F32 || fb == Some(Format::Float(BFLOAT16)) || fb == Some(Format::Float(FLOAT16))
    });
    assert_eq!(cases, shapes.len() * 6 * 4 + rows.len() * coded.count() * 4);
    assert_eq!(cases + skipped, (shapes.len() + rows.len()) * 6 * 4);
    // Columns 4 KiB apart with a depth below the groups' lag (40 steps against
    // 48): one row of A, 20 columns of 40 f64 values, 512 apart.
    let av: Vec<f64> = (0..40).map(|_| g.unit()).collect();
    let bv: Vec<f64> = (0..20 * 512).map(|_| g.unit()).collect();
    // SAFETY: the views lie inside their vectors.
    let (a, b) = unsafe {
        (
            Operand::from_raw(av.as_ptr() as *const u8, Storage::F64, None, 1, 40, 40, 1, "a").unwrap(),
            Operand::from_raw(bv.as_ptr() as *const u8, Storage::F64, None, 40, 20, 1, 512, "b").unwrap(),
        )
    };
    let (mut fast, mut nest) = (vec![0f64; 20], vec![0f64; 20]);
    // SAFETY: both hold 1 x 20.
    assert!(unsafe { f64v::gemv_f64(&a, &b, OutMat::from_raw(fast.as_mut_ptr(), 1, 20, 20, 1)) });
    driver::gemm(&kernels::F64Avx2, &a, &b, unsafe { OutMat::from_raw(nest.as_mut_ptr(), 1, 20, 20, 1) });
    assert!(fast.iter().zip(&nest).all(|(x, y)| x.to_bits() == y.to_bits()), "{fast:?} vs {nest:?}");
    // Not taken: 9 rows (f64v::ROWS + 1) against 9 columns, and 2 rows of a B
    // with neither its rows nor its columns contiguous times an A with neither.
    let v = vec![0f64; 128];
    let op = |rows, cols, rs, cs| unsafe { Operand::from_raw(v.as_ptr() as *const u8, Storage::F64, None, rows, cols, rs, cs, "a").unwrap() };
    let mut c = [0f64; 96];
    // SAFETY: c holds 9 x 9.
    assert!(!unsafe { f64v::gemv_f64(&op(9, 8, 8, 1), &op(8, 9, 9, 1), OutMat::from_raw(c.as_mut_ptr(), 9, 9, 9, 1)) });
    // SAFETY: c holds 2 x 2.
    assert!(!unsafe { f64v::gemv_f64(&op(2, 8, 16, 2), &op(8, 2, 2, 32), OutMat::from_raw(c.as_mut_ptr(), 2, 2, 2, 1)) });
}

/// An emulated matrix-vector product runs transposed (one row of A, C's rows as
/// columns, the words of rows and columns trading places): the same bits as the
/// product as given, in every mode (stochastic with chunk totals too), from
/// float32, bfloat16, float16 and e4m3fn inputs, at 1 and 2 threads, into a
/// strided column of C.
#[test]
fn matrix_vector_products_run_transposed() {
    let _settings = crate::settings_write();
    let old = crate::parallel::num_threads();
    let mut g = Lcg(31);
    let custom = |e, m| Format::Float(FloatFormat::new(e, m, None, true, crate::format::NanPolicy::Ieee, true).unwrap());
    let (f16, bf16, e5m2, f32f) = (Format::Float(FLOAT16), Format::Float(BFLOAT16), Format::Float(FLOAT8_E5M2), Format::Float(FLOAT32));
    let o = RoundOpts::new;
    let sr = |rbits: u32| RoundOpts { rbits, key: SeedKey::from_seed(rbits as u64 + 3), ..o(Mode::Stochastic) };
    let modes = [
        (f16, o(Mode::NearestEven)),
        (bf16, o(Mode::NearestEven)),
        (e5m2, o(Mode::NearestEven)),
        (custom(6, 9), o(Mode::NearestEven)),
        (f16, o(Mode::TowardZero)),
        (bf16, o(Mode::Up)),
        (e5m2, o(Mode::Down)),
        (f32f, o(Mode::Up)),
        (f16, sr(32)),
        (bf16, sr(32)),
        (f16, sr(13)),
        (e5m2, sr(32)),
        (f32f, sr(32)),
        (custom(6, 9), sr(14)),
    ];
    let inputs = [(Storage::F32, None), (Storage::U16, Some(Format::Float(BFLOAT16))), (Storage::U16, Some(Format::Float(FLOAT16))), (Storage::U8, Some(Format::Float(FLOAT8_E4M3FN)))];
    let mut cases = 0;
    for &(m, k) in &[(2, 1), (5, 40), (17, 300), (70, 129), (260, 33), (9, 530)] {
        for (q, &(st, fmt)) in inputs.iter().enumerate() {
            let (av, bv) = if st == Storage::U8 {
                let sp = [0x7e, 0xfe, 0x7f, 0x80, 0x00, 0x01, 0x81];
                (fp8_codes(&mut g, m * k, &sp, 300), fp8_codes(&mut g, k, &sp, 300))
            } else {
                (random_codes(&mut g, st, m * k, q == 1), random_codes(&mut g, st, k, false))
            };
            // SAFETY: the views cover their vectors (B: one column, k rows).
            let (a, b) = unsafe { (Operand::from_raw(av.as_ptr(), st, fmt, m, k, k as isize, 1, "a").unwrap(), Operand::from_raw(bv.as_ptr(), st, fmt, k, 1, 1, 1, "b").unwrap()) };
            for &(fmt, opts) in &modes {
                for chunk in [None, Some((7, fmt)), Some((5, f32f)), Some((16, if fmt == f16 { bf16 } else { f16 }))] {
                    let spec = AccumSpec { fmt, chunk, opts };
                    for threads in [1, 2] {
                        crate::parallel::set_num_threads(threads).unwrap();
                        // C: column 1 of an m x 3 matrix.
                        let mut got = vec![-5f64; m * 3];
                        let mut want = vec![-5f64; m * 3];
                        // SAFETY: both hold m rows of 3.
                        matmul_emulated(&a, &b, unsafe { OutMat::from_raw(got.as_mut_ptr().add(1), m, 1, 3, 1) }, &spec).unwrap();
                        super::emulate::testing::matmul_as_given(&a, &b, unsafe { OutMat::from_raw(want.as_mut_ptr().add(1), m, 1, 3, 1) }, &spec).unwrap();
                        for (idx, (x, y)) in got.iter().zip(&want).enumerate() {
                            assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()), "{m}x{k} {st:?} {fmt:?} {opts:?} {chunk:?} {threads} thr [{idx}]: {x:e} vs {y:e}");
                            assert!(idx % 3 == 1 || *x == -5.0, "wrote outside C");
                        }
                        cases += 1;
                    }
                }
            }
        }
    }
    crate::parallel::set_num_threads(old).unwrap();
    assert_eq!(cases, 6 * 4 * 14 * 4 * 2);
}

/// Packing float8_e5m2 and float8_e4m3fn codes whose lines are contiguous (a
/// row-major B's rows; the arithmetic decode, 8 codes at a time, and its scalar
/// tail), and those of the 8-bit floats [`kernels::Place8`] decodes (float8_e4m3fnuz,
/// float8_e5m2fnuz, float8_e4m3, a FloatFormat(3, 4) of bias 1), gives every
/// code's value (`Format::decode`), in f32 and f64, NaN codes a NaN (the
/// default quiet NaN when quieted), infinities infinities, zeros past the
/// line's values; the same with the table's scalar decode (`LOWP_ISA=scalar`).
#[test]
fn pack_fp8_codes_every_code() {
    let _settings = crate::settings_write();
    fn check<T: kernels::Real + Into<f64>>(op: &Operand, f: &FloatFormat, codes: &[u8], cols: usize, nv: usize, w: usize, kc: usize, quiet: bool, bits: impl Fn(T) -> u64, nan_bits: u64) {
        let mut dst = vec![T::from_f32(7.0); w * kc + 3];
        // SAFETY: rows 0..kc and columns 0..nv are inside the codes (row-major, `cols` apart).
        unsafe {
            if quiet {
                kernels::pack_real::<T, true>(op, 0, 1, cols as isize, nv, w, kc, &mut dst);
            } else {
                kernels::pack_real::<T, false>(op, 0, 1, cols as isize, nv, w, kc, &mut dst);
            }
        }
        for p in 0..kc {
            for l in 0..w {
                let got = dst[p * w + l];
                let g: f64 = got.into();
                if l >= nv {
                    assert_eq!(bits(got), 0, "{f:?} row {p} column {l}: padding");
                    continue;
                }
                let c = codes[p * cols + l];
                let want = f.decode(c as u64);
                if want.is_nan() {
                    assert!(g.is_nan(), "{f:?} code {c:#04x}: {g}");
                    if quiet {
                        assert_eq!(bits(got), nan_bits, "{f:?} code {c:#04x}: not the default NaN");
                    }
                } else {
                    assert!(g == want && g.is_sign_negative() == want.is_sign_negative(), "{f:?} code {c:#04x}: {g:e} vs {want:e}");
                }
            }
        }
        assert_eq!(dst[w * kc..].iter().map(|&x| bits(x)).collect::<Vec<_>>(), vec![bits(T::from_f32(7.0)); 3], "{f:?}: written past the panel");
    }
    let mut g = Lcg(41);
    let custom = FloatFormat::new(3, 4, Some(1), true, crate::format::NanPolicy::Ieee, true).unwrap();
    for f in [FLOAT8_E5M2, FLOAT8_E4M3FN, FLOAT8_E4M3FNUZ, FLOAT8_E5M2FNUZ, FLOAT8_E4M3, custom] {
        let (rows, cols) = (40, 37);
        // Every code, in order (runs of 8 with and without NaN codes), then random ones.
        let codes: Vec<u8> = (0..rows * cols).map(|x| if x < 256 { x as u8 } else { g.next() as u8 }).collect();
        // SAFETY: the view is inside `codes`.
        let op = unsafe { Operand::from_raw(codes.as_ptr(), Storage::U8, Some(Format::Float(f)), rows, cols, cols as isize, 1, "b").unwrap() };
        for isa in [None, Some(crate::convert::Isa::Scalar)] {
            set_isa(isa).unwrap();
            for (nv, w) in [(37, 40), (16, 16), (8, 8), (5, 8), (29, 32)] {
                for quiet in [false, true] {
                    check::<f32>(&op, &f, &codes, cols, nv, w, rows, quiet, |x| x.to_bits() as u64, f32::NAN.to_bits() as u64);
                    check::<f64>(&op, &f, &codes, cols, nv, w, rows, quiet, |x| x.to_bits(), f64::NAN.to_bits());
                }
            }
        }
        set_isa(None).unwrap();
    }
}

/// Packing lines along the depth (`sk` = 1: a row-major A's strips, the
/// column-contiguous B strips of the vector and emulated paths) of float16
/// codes (every one of the 65536) and of the 8-bit floats of
/// [`pack_fp8_codes_every_code`] (every code): 6, 8, 16 and 32 lines, some of
/// them padding, over depths with whole blocks of the interleave and a tail
/// (runs decoded 8 codes at a time and the rest one at a time), from an
/// offset inside the operand. Every value is the format's decoding, bit for
/// bit, signaling float16 NaNs and their payloads included (the scalar
/// decode's; `vcvtph2ps` would quiet them), or the default quiet NaN when
/// quieted; zeros in the padding lines; nothing written past the panel. The
/// same with the scalar decode (`LOWP_ISA=scalar`).
#[test]
fn pack_lines_along_the_depth_every_code() {
    let _settings = crate::settings_write();
    fn check<T: kernels::Real + Into<f64>>(op: &Operand, want: &dyn Fn(isize) -> (f64, Option<f32>), base: isize, sl: isize, nv: usize, w: usize, kc: usize, quiet: bool, bits: impl Fn(T) -> u64, nan_bits: u64, name: &str) {
        let mut dst = vec![T::from_f32(7.0); w * kc + 3];
        // SAFETY: lines 0..nv from `base`, `sl` apart, hold kc codes each inside the operand.
        unsafe {
            if quiet {
                kernels::pack_real::<T, true>(op, base, sl, 1, nv, w, kc, &mut dst);
            } else {
                kernels::pack_real::<T, false>(op, base, sl, 1, nv, w, kc, &mut dst);
            }
        }
        for p in 0..kc {
            for l in 0..w {
                let got = dst[p * w + l];
                if l >= nv {
                    assert_eq!(bits(got), 0, "{name}: step {p} line {l}: padding");
                    continue;
                }
                let (x, nan) = want(base + l as isize * sl + p as isize);
                let g: f64 = got.into();
                if x.is_nan() && quiet {
                    assert_eq!(bits(got), nan_bits, "{name}: step {p} line {l}: not the default NaN");
                } else if x.is_nan() {
                    // A float16 NaN: the scalar decode's, payload and all (in f32).
                    let same = match nan {
                        Some(y) if std::mem::size_of::<T>() == 4 => bits(got) == bits(T::from_f32(y)),
                        _ => true,
                    };
                    assert!(g.is_nan() && same, "{name}: step {p} line {l}: NaN {:#x}", bits(got));
                } else {
                    assert!(g == x && g.is_sign_negative() == x.is_sign_negative(), "{name}: step {p} line {l}: {g:e} vs {x:e}");
                }
            }
        }
        assert_eq!(dst[w * kc..].iter().map(|&x| bits(x)).collect::<Vec<_>>(), vec![bits(T::from_f32(7.0)); 3], "{name}: written past the panel");
    }
    let mut g = Lcg(43);
    let custom = FloatFormat::new(3, 4, Some(1), true, crate::format::NanPolicy::Ieee, true).unwrap();
    // Lines of `cols` codes: every code first, in order, then random ones.
    let cases: Vec<(FloatFormat, usize)> = vec![(FLOAT16, 1700), (FLOAT8_E5M2, 157), (FLOAT8_E4M3FN, 157), (FLOAT8_E4M3FNUZ, 157), (FLOAT8_E5M2FNUZ, 157), (FLOAT8_E4M3, 157), (custom, 157)];
    for (f, cols) in cases {
        let rows = 40;
        let half = f.bits() == 16;
        let all = 1usize << f.bits();
        let codes: Vec<u16> = (0..rows * cols).map(|x| if x < all { x as u16 } else { g.next() as u16 & (all - 1) as u16 }).collect();
        let bytes: Vec<u8> = codes.iter().map(|&c| c as u8).collect();
        // SAFETY: the views are inside `codes` / `bytes`.
        let op = unsafe {
            if half {
                Operand::from_raw(codes.as_ptr() as *const u8, Storage::U16, Some(Format::Float(f)), rows, cols, cols as isize, 1, "a").unwrap()
            } else {
                Operand::from_raw(bytes.as_ptr(), Storage::U8, Some(Format::Float(f)), rows, cols, cols as isize, 1, "a").unwrap()
            }
        };
        // The scalar decode of a float16 code keeps a NaN's payload; the format's
        // decoding in f64 gives every other value.
        let want = |o: isize| {
            let c = codes[o as usize];
            if half {
                (f16_to_f32(c) as f64, Some(f16_to_f32(c)))
            } else {
                (f.decode(c as u64), None)
            }
        };
        for isa in [None, Some(crate::convert::Isa::Scalar)] {
            set_isa(isa).unwrap();
            for (nv, w) in [(6, 6), (5, 6), (8, 8), (12, 12), (7, 12), (16, 16), (13, 16), (32, 32), (31, 32)] {
                for (base, kc) in [(0, cols), (2 * cols as isize + 3, cols - 3), (cols as isize + 1, 64 + 9)] {
                    // Lines every row, and every other row.
                    for sl in [cols as isize, 2 * cols as isize] {
                        if base as usize + (nv - 1) * sl as usize + kc > rows * cols {
                            continue;
                        }
                        for quiet in [false, true] {
                            let name = format!("{f:?} nv {nv} w {w} base {base} kc {kc} sl {sl} quiet {quiet} isa {isa:?}");
                            check::<f32>(&op, &want, base, sl, nv, w, kc, quiet, |x| x.to_bits() as u64, f32::NAN.to_bits() as u64, &name);
                            check::<f64>(&op, &want, base, sl, nv, w, kc, quiet, |x| x.to_bits(), f64::NAN.to_bits(), &name);
                        }
                    }
                }
            }
        }
        set_isa(None).unwrap();
    }
}

