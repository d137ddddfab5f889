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
    ]
}

fn paths() -> Vec<Isa> {
    [Isa::Sse2, Isa::Avx2].into_iter().filter(|&i| i <= detected_isa()).collect()
}

/// Run a plan into codes of type C and widen them.
fn run_plan<C: Code>(plan: &fast::EncodePlan, xs: &[f32], i0: u64) -> Vec<u32> {
    let mut got = vec![C::default(); xs.len()];
    plan.run(xs, &mut got, i0);
    got.iter().map(|c| c.to_u64() as u32).collect()
}

#[test]
fn fast_paths_match_reference() {
    let mut xs = probe_inputs();
    // A length that is no multiple of any vector width, so tails run too.
    xs.extend([1.5f32, -2.75, 3.0e-5, -7.0e-9, 65519.0]);
    assert!(xs.len() % 32 != 0);
    for fmt in formats() {
        for mode in Mode::ALL {
            for saturate in [false, true] {
                for rbits in [32u32, 7] {
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
                        let plan = fast::EncodePlan::new::<f32>(&fmt, &opts, path).expect("fast path applies");
                        let mut outs = vec![("u32", run_plan::<u32>(&plan, &xs, 1000))];
                        if fmt.bits() <= 16 {
                            outs.push(("u16", run_plan::<u16>(&plan, &xs, 1000)));
                        }
                        if fmt.bits() <= 8 {
                            outs.push(("u8", run_plan::<u8>(&plan, &xs, 1000)));
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
                        let mut vals = vec![0f32; xs.len()];
                        plan.run_round(&xs, &mut vals, 1000);
                        for i in 0..xs.len() {
                            let w = fmt.decode(want[i] as u64) as f32;
                            assert_eq!(vals[i].to_bits(), w.to_bits(), "round {fmt:?} {mode:?} sat={saturate} {path:?} x={:e}", xs[i]);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn index_blocks_cross_2_pow_32() {
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
