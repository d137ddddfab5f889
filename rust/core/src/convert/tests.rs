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

#[test]
fn fast_paths_match_reference() {
    let xs = probe_inputs();
    let paths: Vec<Isa> = [Isa::Sse2, Isa::Avx2].into_iter().filter(|&i| i <= detected_isa()).collect();
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
                    for &path in &paths {
                        let plan = fast::EncodePlan::new::<f32>(&fmt, &opts, path).expect("fast path applies");
                        let mut got = vec![0u32; xs.len()];
                        plan.run(&xs, &mut got, 1000);
                        for i in 0..xs.len() {
                            assert_eq!(got[i], want[i], "{fmt:?} {mode:?} sat={saturate} {path:?} x={:e} ({:#x})", xs[i], xs[i].to_bits());
                        }
                        let mut vals = vec![0f32; xs.len()];
                        plan.run_round(&xs, &mut vals, 1000);
                        for i in 0..xs.len() {
                            let w = fmt.decode(want[i] as u64) as f32;
                            assert!(vals[i].to_bits() == w.to_bits() || (w.is_nan() && vals[i].is_nan()), "round {fmt:?} {mode:?} x={:e}", xs[i]);
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

#[test]
fn decode_paths_agree() {
    for fmt in formats().into_iter().chain([Format::Posit(named::POSIT8), Format::Posit(named::POSIT16)]) {
        let n = 1usize << fmt.bits().min(16);
        let codes: Vec<u16> = (0..n as u32).map(|c| c as u16).collect();
        let mut a = vec![0f32; n];
        let mut b = vec![0f32; n];
        set_isa(Some(Isa::Scalar)).unwrap();
        decode(&fmt, &codes, &mut a).unwrap();
        set_isa(None).unwrap();
        decode(&fmt, &codes, &mut b).unwrap();
        for i in 0..n {
            assert!(a[i].to_bits() == b[i].to_bits() || (a[i].is_nan() && b[i].is_nan()), "{fmt:?} {i:#x}");
        }
    }
}
