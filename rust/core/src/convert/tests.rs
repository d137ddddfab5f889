//! Fast paths against the reference engine, bit for bit.

use super::*;
use crate::format::{named, FloatFormat, NanPolicy};
use crate::round::SeedKey;

/// f32 inputs that stress every format: all exponents, mantissa patterns near
/// ties at every shift, specials.
fn probe_inputs() -> Vec<f32> {
    let mut v = vec![0.0f32, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN, f32::MAX, f32::MIN_POSITIVE];
    let mut s = 0x1234_5678_9abc_def0u64;
    for e in 0..256u32 {
        for sh in 0..24u32 {
            for d in [-1i32, 0, 1] {
                let m = ((1u32 << sh) as i32 + d) as u32 & 0x7f_ffff;
                v.push(f32::from_bits((e << 23) | m));
                v.push(f32::from_bits(0x8000_0000 | (e << 23) | (m ^ 0x55_5555 & ((1 << sh) - 1))));
            }
        }
        for _ in 0..64 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            v.push(f32::from_bits((e << 23) | (s as u32 & 0x807f_ffff)));
        }
    }
    v
}

fn formats() -> Vec<Format> {
    use named::*;
    vec![
        Format::Float(BFLOAT16),
        Format::Float(FLOAT16),
        Format::Float(FLOAT8_E5M2),
        Format::Float(FLOAT8_E4M3FN),
        Format::Float(FLOAT8_E4M3),
        Format::Float(FLOAT8_E4M3FNUZ),
        Format::Float(FLOAT8_E5M2FNUZ),
        Format::Float(FloatFormat::new(4, 3, Some(11), true, NanPolicy::Ieee, true).unwrap()),
        Format::Float(FloatFormat::new(3, 2, None, false, NanPolicy::None, true).unwrap()),
        Format::Float(FloatFormat::new(8, 22, None, true, NanPolicy::Ieee, true).unwrap()),
        Format::Float(FloatFormat::new(6, 9, None, true, NanPolicy::Ieee, true).unwrap()),
        // Ranges that start at or past the top of f32's: the smallest normal 2^127
        // (f32's last exponent field), then 2^128 and 2^130, beyond every f32.
        Format::Float(FloatFormat::new(5, 10, Some(-126), true, NanPolicy::Ieee, true).unwrap()),
        Format::Float(FloatFormat::new(5, 10, Some(-127), true, NanPolicy::Ieee, true).unwrap()),
        Format::Float(FloatFormat::new(5, 22, Some(-129), true, NanPolicy::Ieee, true).unwrap()),
    ]
}

fn paths() -> Vec<Isa> {
    [Isa::Sse2, Isa::Avx2].into_iter().filter(|&i| i <= detected_isa()).collect()
}

/// Run a plan into codes of type C and widen them; with streaming stores,
/// into a destination starting at every offset within 32 bytes.
fn run_plan<C: Code>(plan: &mut fast::EncodePlan, xs: &[f32], i0: u64) -> Vec<u32> {
    let mut got = vec![C::default(); xs.len()];
    plan.nt = false;
    plan.run(xs, &mut got, i0);
    let got: Vec<u32> = got.iter().map(|c| c.to_u64() as u32).collect();
    if cfg!(target_arch = "x86_64") {
        plan.nt = true;
        // Aligned, and the heads of every length class (1, some, all but one element short of 32 bytes).
        for off in [0, 1, 3, 32 / C::BYTES - 1] {
            let mut buf = vec![C::default(); xs.len() + off];
            plan.run(xs, &mut buf[off..], i0);
            for (i, c) in buf[off..].iter().enumerate() {
                assert_eq!(c.to_u64() as u32, got[i], "streaming stores at offset {off}, element {i}");
            }
        }
        plan.nt = false;
    }
    got
}

#[test]
fn fast_paths_match_reference() {
    let _settings = crate::settings_read();
    let mut xs = probe_inputs();
    // A length that is no multiple of any vector width, so tails run too.
    xs.extend([1.5f32, -2.75, 3.0e-5, -7.0e-9, 65519.0]);
    assert!(!xs.len().is_multiple_of(32));
    for fmt in formats() {
        for mode in Mode::ALL {
            for saturate in [false, true] {
                for rbits in [32u32, 20, 7] {
                    if mode != Mode::Stochastic && rbits != 32 {
                        continue;
                    }
                    let opts = RoundOpts { mode, saturate, rbits, key: SeedKey::from_seed(9) };
                    let rng = Rng::new(opts.key);
                    let want: Vec<u32> = xs
                        .iter()
                        .enumerate()
                        .map(|(i, &x)| reference_encode_one(&fmt, x, &opts, &rng, 1000 + i as u64) as u32)
                        .collect();
                    for &path in &paths() {
                        let Some(mut plan) = fast::EncodePlan::new::<f32>(&fmt, &opts, path) else {
                            // Only where the smallest normal passes f32's exponent fields:
                            // there encode takes the engine.
                            assert!(matches!(fmt, Format::Float(f) if f.emin() + 127 > 254), "{fmt:?}: fast path applies");
                            let mut got = vec![0u32; xs.len()];
                            encode(&fmt, &xs, &mut got, &opts, 1000).unwrap();
                            assert_eq!(got, want, "{fmt:?} {mode:?} sat={saturate} encode");
                            continue;
                        };
                        let mut outs = vec![("u32", run_plan::<u32>(&mut plan, &xs, 1000))];
                        if fmt.bits() <= 16 {
                            outs.push(("u16", run_plan::<u16>(&mut plan, &xs, 1000)));
                        }
                        if fmt.bits() <= 8 {
                            outs.push(("u8", run_plan::<u8>(&mut plan, &xs, 1000)));
                        }
                        for (ty, got) in outs {
                            for i in 0..xs.len() {
                                assert_eq!(
                                    got[i], want[i],
                                    "{fmt:?} {mode:?} sat={saturate} rbits={rbits} {path:?} {ty} x={:e} ({:#x})",
                                    xs[i],
                                    xs[i].to_bits()
                                );
                            }
                        }
                        // (round takes the engine for formats wider than f32: see `wide`.)
                        let wide = matches!(fmt, Format::Float(f) if f.max_value() > f32::MAX as f64);
                        for (nt, off) in [(false, 0), (true, 0), (true, 3)] {
                            if wide {
                                break;
                            }
                            plan.nt = nt;
                            let mut buf = vec![0f32; xs.len() + off];
                            plan.run_round(&xs, &mut buf[off..], 1000);
                            let vals = &buf[off..];
                            for i in 0..xs.len() {
                                let w = fmt.decode(want[i] as u64) as f32;
                                assert_eq!(vals[i].to_bits(), w.to_bits(), "round {fmt:?} {mode:?} sat={saturate} {path:?} nt={nt} x={:e}", xs[i]);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn index_blocks_cross_2_pow_32() {
    let _settings = crate::settings_read();
    let opts = RoundOpts { mode: Mode::Stochastic, saturate: false, rbits: 32, key: SeedKey::from_seed(3) };
    let fmt = Format::Float(named::BFLOAT16);
    let xs: Vec<f32> = (0..100).map(|i| 1.0 + i as f32 * 1e-4).collect();
    let i0 = (1u64 << 32) - 50;
    let rng = Rng::new(opts.key);
    let want: Vec<u16> = xs.iter().enumerate().map(|(i, &x)| reference_encode_one(&fmt, x, &opts, &rng, i0 + i as u64) as u16).collect();
    let mut got = vec![0u16; xs.len()];
    encode(&fmt, &xs, &mut got, &opts, i0).unwrap();
    assert_eq!(got, want);
}

/// Every code (with junk above the format's bits when the storage is wider),
/// decoded on every path, equals the reference bit for bit (NaN included).
fn check_decode<C: Code>(fmt: &Format, codes: &[C]) {
    let mut want = vec![0f32; codes.len()];
    let mut want64 = vec![0f64; codes.len()];
    set_isa(Some(Isa::Scalar)).unwrap();
    decode(fmt, codes, &mut want).unwrap();
    decode(fmt, codes, &mut want64).unwrap();
    for &path in &paths() {
        set_isa(Some(path)).unwrap();
        let mut got = vec![0f32; codes.len()];
        decode(fmt, codes, &mut got).unwrap();
        let mut got64 = vec![0f64; codes.len()];
        decode(fmt, codes, &mut got64).unwrap();
        #[cfg(target_arch = "x86_64")]
        if path == Isa::Avx2 {
            // Streaming stores, destination at every offset within 32 bytes.
            if let Some(plan) = fast::DecodePlan::new(fmt) {
                for off in 0..9 {
                    let mut buf = vec![0f32; codes.len() + off];
                    let d = &mut buf[off..];
                    // SAFETY: this CPU has AVX2, FMA and F16C (path <= detected_isa()).
                    match &plan {
                        fast::DecodePlan::Bf16 => unsafe { avx2::decode_bf16(codes, d, true) },
                        fast::DecodePlan::F16 => unsafe { avx2::decode_f16(codes, d, true) },
                        fast::DecodePlan::Lanes(p) => unsafe { avx2::decode(p, codes, d, true) },
                    }
                    for i in 0..codes.len() {
                        assert_eq!(d[i].to_bits(), want[i].to_bits(), "streaming {fmt:?} offset {off} code {:#x}", codes[i].to_u64());
                    }
                }
            }
        }
        for i in 0..codes.len() {
            let c = codes[i].to_u64();
            assert_eq!(got[i].to_bits(), want[i].to_bits(), "{fmt:?} {path:?} code {c:#x}");
            assert_eq!(got64[i].to_bits(), want64[i].to_bits(), "f64 {fmt:?} {path:?} code {c:#x}");
        }
    }
    set_isa(None).unwrap();
}

#[test]
fn decode_paths_agree() {
    let _settings = crate::settings_read();
    for fmt in formats().into_iter().chain([Format::Posit(named::POSIT8), Format::Posit(named::POSIT16)]) {
        if fmt.bits() > 16 {
            continue;
        }
        let n = 1u32 << fmt.bits();
        // Twice over with junk in the unused upper bits, plus an odd tail.
        let reps = |w: u32| (0..2 * n + 13).map(move |i| (i % n) | if i >= n { (0xffff_u32 << fmt.bits()) & w } else { 0 });
        let c16: Vec<u16> = reps(0xffff).map(|c| c as u16).collect();
        check_decode(&fmt, &c16);
        if fmt.bits() <= 8 {
            let c8: Vec<u8> = reps(0xff).map(|c| c as u8).collect();
            check_decode(&fmt, &c8);
        }
    }
}

/// f64 inputs: every exponent near the range of any format of at most 32 bits
/// (and a sample beyond), mantissas at and next to the tie of every shift,
/// random mantissas, specials.
fn probe_inputs64() -> Vec<f64> {
    let mut v = vec![0.0f64, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -f64::NAN, f64::MAX, f64::MIN_POSITIVE, 5e-324];
    v.push(1.0 + 2f64.powi(-8) + 2f64.powi(-30));
    v.push(f64::from_bits(0x7ff0_0000_0000_0001));
    let mut s = 0x0123_4567_89ab_cdefu64;
    let exps: Vec<u64> = (0..2048u64).filter(|&e| (1023 - 330..=1023 + 330).contains(&e) || e % 37 == 0 || !(3..=2044).contains(&e)).collect();
    for e in exps {
        for sh in 0..53u32 {
            for d in [-1i64, 0, 1] {
                let m = ((1u64 << sh) as i64 + d) as u64 & ((1 << 52) - 1);
                v.push(f64::from_bits((e << 52) | m));
                v.push(f64::from_bits((1 << 63) | (e << 52) | (m ^ (0x5_5555_5555_5555 & ((1 << sh) - 1)))));
            }
        }
        for _ in 0..24 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            v.push(f64::from_bits((e << 52) | (s & 0x800f_ffff_ffff_ffff)));
        }
    }
    v.push(3.0);
    v
}

#[test]
fn fast64_paths_match_reference() {
    let _settings = crate::settings_read();
    let xs = probe_inputs64();
    for fmt in formats() {
        for mode in Mode::ALL {
            for saturate in [false, true] {
                for rbits in [64u32, 40, 32, 7] {
                    if mode != Mode::Stochastic && rbits != 64 {
                        continue;
                    }
                    let opts = RoundOpts { mode, saturate, rbits, key: SeedKey::from_seed(11) };
                    let rng = Rng::new(opts.key);
                    let i0 = (1u64 << 32) - 7000;
                    let want: Vec<u32> = xs
                        .iter()
                        .enumerate()
                        .map(|(i, &x)| reference_encode_one(&fmt, x, &opts, &rng, i0 + i as u64) as u32)
                        .collect();
                    for &path in &paths() {
                        let plan = fast::EncodePlan64::new::<f64>(&fmt, &opts, path).expect("fast path applies");
                        let mut got = vec![0u32; xs.len()];
                        plan.run(&xs, &mut got, i0);
                        let mut got8 = vec![0u8; xs.len()];
                        if fmt.bits() <= 8 {
                            plan.run(&xs, &mut got8, i0);
                        }
                        let mut vals = vec![0f64; xs.len()];
                        plan.run_round(&xs, &mut vals, i0);
                        for i in 0..xs.len() {
                            let ctx = || format!("{fmt:?} {mode:?} sat={saturate} rbits={rbits} {path:?} x={:e} ({:#x})", xs[i], xs[i].to_bits());
                            assert_eq!(got[i], want[i], "{}", ctx());
                            if fmt.bits() <= 8 {
                                assert_eq!(got8[i] as u32, want[i], "u8 {}", ctx());
                            }
                            assert_eq!(vals[i].to_bits(), fmt.decode(want[i] as u64).to_bits(), "round {}", ctx());
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn f64_rounds_once() {
    let _settings = crate::settings_read();
    // 1 + 2^-8 + 2^-30 is above the midpoint 1 + 2^-8 of bf16's neighbours 1 and 1 + 2^-7.
    let x = [1.0 + 2f64.powi(-8) + 2f64.powi(-30)];
    let mut c = [0u16];
    encode(&Format::Float(named::BFLOAT16), &x, &mut c, &RoundOpts::new(Mode::NearestEven), 0).unwrap();
    assert_eq!(Format::Float(named::BFLOAT16).decode(c[0] as u64), 1.0078125);
}

#[test]
fn special_kernels_are_chosen() {
    let _settings = crate::settings_read();
    use fast::Kind;
    let kind = |f: FloatFormat, mode: Mode, saturate: bool| {
        let opts = RoundOpts { mode, saturate, rbits: 32, key: SeedKey::from_seed(1) };
        fast::EncodePlan::new::<f32>(&Format::Float(f), &opts, Isa::Avx2).unwrap().kind()
    };
    assert_eq!(kind(named::BFLOAT16, Mode::NearestEven, false), Kind::Bf16Ne);
    assert_eq!(kind(named::BFLOAT16, Mode::Stochastic, false), Kind::Bf16Sr);
    assert_eq!(kind(named::FLOAT16, Mode::NearestEven, false), Kind::F16c);
    assert_eq!(kind(named::FLOAT16, Mode::Down, false), Kind::F16c);
    for f in [named::FLOAT8_E4M3FN, named::FLOAT8_E5M2, named::FLOAT8_E4M3, named::FLOAT8_E4M3FNUZ, named::FLOAT8_E5M2FNUZ] {
        assert_eq!(kind(f, Mode::NearestEven, false), Kind::Near, "{f:?}");
        assert_eq!(kind(f, Mode::NearestEven, true), Kind::Near, "{f:?}");
        assert_eq!(kind(f, Mode::Stochastic, false), Kind::StochShift, "{f:?}");
        assert_eq!(kind(f, Mode::TowardZero, false), Kind::Generic, "{f:?}");
    }
    assert_eq!(kind(named::BFLOAT16, Mode::NearestEven, true), Kind::Generic);
}

#[test]
fn posit_fast_path_matches_reference() {
    let _settings = crate::settings_read();
    let xs = probe_inputs();
    let posits = [
        named::POSIT8,
        named::POSIT16,
        named::POSIT32,
        crate::format::PositFormat::new(10, 0).unwrap(),
        crate::format::PositFormat::new(9, 4).unwrap(),
        crate::format::PositFormat::new(6, 3).unwrap(),
        crate::format::PositFormat::new(2, 1).unwrap(),
        crate::format::PositFormat::new(20, 1).unwrap(),
    ];
    for pf in posits {
        let fmt = Format::Posit(pf);
        for (mode, saturate) in Mode::ALL.into_iter().flat_map(|m| [(m, false), (m, true)]) {
            for rbits in [64u32, 40, 32, 7] {
                if mode != Mode::Stochastic && rbits != 32 {
                    continue;
                }
                let opts = RoundOpts { mode, saturate, rbits, key: SeedKey::from_seed(5) };
                let rng = Rng::new(opts.key);
                let i0 = (1u64 << 32) - 3000;
                let want: Vec<u32> =
                    xs.iter().enumerate().map(|(i, &x)| reference_encode_one(&fmt, x, &opts, &rng, i0 + i as u64) as u32).collect();
                for &path in &paths() {
                    let plan = fast::PositPlan::new::<f32>(&fmt, &opts, path).expect("fast path applies");
                    let mut got = vec![0u32; xs.len()];
                    plan.run(&xs, &mut got, i0);
                    for i in 0..xs.len() {
                        assert_eq!(got[i], want[i], "{pf:?} {mode:?} sat={saturate} rbits={rbits} {path:?} x={:e} ({:#x})", xs[i], xs[i].to_bits());
                    }
                }
            }
        }
    }
    // Beyond f32's normal range the plan does not apply.
    let big = Format::Posit(crate::format::PositFormat::new(12, 4).unwrap());
    assert!(fast::PositPlan::new::<f32>(&big, &RoundOpts::new(Mode::NearestEven), Isa::Sse2).is_none());
}

#[test]
fn posit_round_matches_reference() {
    let _settings = crate::settings_read();
    let xs = probe_inputs();
    for pf in [named::POSIT8, named::POSIT16, crate::format::PositFormat::new(12, 1).unwrap()] {
        let fmt = Format::Posit(pf);
        for mode in [Mode::NearestEven, Mode::Stochastic, Mode::Down] {
            let opts = RoundOpts { mode, saturate: false, rbits: 32, key: SeedKey::from_seed(8) };
            let rng = Rng::new(opts.key);
            let mut got = vec![0f32; xs.len()];
            round(&fmt, &xs, &mut got, &opts, 77).unwrap();
            for (i, &x) in xs.iter().enumerate() {
                let w = fmt.decode(reference_encode_one(&fmt, x, &opts, &rng, 77 + i as u64)) as f32;
                assert_eq!(got[i].to_bits(), w.to_bits(), "{pf:?} {mode:?} x={x:e}");
            }
        }
    }
}

/// `round` into float formats whose largest values lie beyond f32's (8
/// exponent bits with a smaller bias, or without infinity): every path gives
/// the reference's values in f32, the largest ones overflowing to infinity.
#[test]
fn round_beyond_f32_matches_reference() {
    let _settings = crate::settings_write();
    let xs = probe_inputs();
    let wide = [
        FloatFormat::new(8, 7, Some(100), true, NanPolicy::Ieee, true).unwrap(),
        FloatFormat::new(8, 5, None, false, NanPolicy::None, true).unwrap(),
        FloatFormat::new(8, 10, None, false, NanPolicy::Fn, true).unwrap(),
    ];
    for f in wide {
        assert!(f.max_value() > f32::MAX as f64);
        let fmt = Format::Float(f);
        for mode in Mode::ALL {
            for saturate in [false, true] {
                let opts = RoundOpts { mode, saturate, rbits: 32, key: SeedKey::from_seed(4) };
                let rng = Rng::new(opts.key);
                let want: Vec<f32> =
                    xs.iter().enumerate().map(|(i, &x)| fmt.decode(reference_encode_one(&fmt, x, &opts, &rng, 5 + i as u64)) as f32).collect();
                for path in [Isa::Scalar].into_iter().chain(paths()) {
                    set_isa(Some(path)).unwrap();
                    let mut got = vec![0f32; xs.len()];
                    let r = round(&fmt, &xs, &mut got, &opts, 5);
                    set_isa(None).unwrap();
                    r.unwrap();
                    for i in 0..xs.len() {
                        assert_eq!(got[i].to_bits(), want[i].to_bits(), "{f:?} {mode:?} sat={saturate} {path:?} x={:e}", xs[i]);
                    }
                }
            }
        }
    }
}
