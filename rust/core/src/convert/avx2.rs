//! AVX2 kernels written with intrinsics: f32 into small IEEE-like formats
//! (every mode), values back to f32, and decoding of 8- and 16-bit formats.
//!
//! Each vector lane computes exactly what [`super::fast::encode_lane`] and
//! [`super::fast::decode_lane`] compute (and those match the reference
//! engine); tails shorter than a vector go through the scalar lanes. Every
//! function here is only called after run-time detection of AVX2, FMA and F16C.

use std::arch::x86_64::*;

use super::fast::{decode_lane, encode_lane, Kind, Params, DN, NA, NE, ODD, RZ, SR, UP};
use super::Code;
use crate::round::Mode;

/// The constants of [`Params`], broadcast to every lane.
#[derive(Clone, Copy)]
struct K {
    abs: __m256i,
    exp_inf: __m256i,
    one: __m256i,
    zero: __m256i,
    c32: __m256i,
    half: __m256i,
    tmin: __m256i,
    base_sh: __m256i,
    m: __m128i,
    max_code: __m256i,
    sign_bit: __m256i,
    sign_floor: __m256i,
    tmin_sh: __m256i,
    nan_p: __m256i,
    nan_x: __m256i,
    inf_p: __m256i,
    inf_x: __m256i,
    ovf_p: __m256i,
    ovf_x: __m256i,
    rmask: __m256i,
    a0: u32,
    g0: u32,
    step: __m256i,
    // Decoding.
    mag_mask: __m256i,
    m_unit: __m256i,
    rebias: __m256i,
    sub_scale: __m256,
    sign_to_31: __m128i,
    qnan: __m256i,
    inf_mag: __m256i,
    inf_f32: __m256i,
    fnuz_nan: __m256i,
    base_sh_x: __m128i,
    code_mask: __m256i,
    // Nearest-even with float subnormals.
    near_half: __m256i,
    near_rebias: __m256i,
    sub_lim: __m256i,
    sub_up: __m256,
    // Stochastic by add-and-shift.
    sr_low: __m256i,
    sr_keep: __m256i,
    sr_rsh: __m128i,
    // bfloat16.
    bf_half: __m256i,
    bf_low16: __m256i,
    bf_m16: __m256i,
    bf_keep: __m256i,
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn consts(p: &Params) -> K {
    let s = |v: u32| _mm256_set1_epi32(v as i32);
    K {
        abs: s(0x7fff_ffff),
        exp_inf: s(0x7f80_0000),
        one: s(1),
        zero: _mm256_setzero_si256(),
        c32: s(32),
        half: s(1 << 31),
        tmin: s(p.tmin_ef as u32),
        base_sh: s(p.base_sh as u32),
        m: _mm_cvtsi32_si128(p.m as i32),
        max_code: s(p.max_code),
        sign_bit: s(p.sign_bit),
        sign_floor: s(if p.fnuz { 0 } else { u32::MAX }),
        tmin_sh: s((p.tmin_ef + p.base_sh) as u32),
        nan_p: s(p.nan_p),
        nan_x: s(p.nan_p ^ p.nan_n),
        inf_p: s(p.inf_p),
        inf_x: s(p.inf_p ^ p.inf_n),
        ovf_p: s(p.ovf_p),
        ovf_x: s(p.ovf_p ^ p.ovf_n),
        // The top `rbits` bits: comparing them is comparing the shifted values.
        rmask: s(if p.rbits >= 32 { u32::MAX } else { !(u32::MAX >> p.rbits) }),
        a0: p.rng.key.a0,
        g0: p.rng.key.g0,
        step: _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        mag_mask: s(p.mag_mask),
        m_unit: s(p.sub_below),
        rebias: s(p.rebias),
        sub_scale: _mm256_set1_ps(p.sub_scale),
        sign_to_31: _mm_cvtsi32_si128(31 - p.sign_shift as i32),
        qnan: s(0x7fc0_0000),
        inf_mag: s(p.inf_mag),
        inf_f32: s(0x7f80_0000),
        fnuz_nan: s(if p.fnuz { p.sign_bit } else { u32::MAX }),
        base_sh_x: _mm_cvtsi32_si128(p.base_sh),
        code_mask: s(p.mag_mask | p.sign_bit),
        near_half: s((1u32 << (p.base_sh - 1)) - 1),
        near_rebias: s(((p.tmin_ef - 1) as u32) << p.m),
        sub_lim: s((p.tmin_ef as u32) << 23),
        // 2^(m - emin) (the plan checks it is a normal f32).
        sr_low: s({
            let low = (1u32 << p.base_sh) - 1;
            low & !(low >> p.rbits.min(31))
        }),
        sr_keep: s({
            let low = (1u32 << p.base_sh) - 1;
            !low | (low & !(low >> p.rbits.min(31)))
        }),
        sr_rsh: _mm_cvtsi32_si128(32 - p.base_sh),
        bf_half: s(0x7fff),
        bf_low16: s(0xffff),
        // The random bits compared, within the low 16 bits: the top min(rbits, 16) of them.
        bf_m16: s(0xffff_u32 & !(0xffff_u32 >> p.rbits.min(16))),
        // x without the low bits that are not compared.
        bf_keep: s(!0xffff_u32 | (0xffff_u32 & !(0xffff_u32 >> p.rbits.min(16)))),
        sub_up: _mm256_set1_ps(f32::from_bits(((p.m as i32 + 254 - p.tmin_ef).clamp(1, 254) as u32) << 23)),
    }
}

/// The Weyl values of elements lo0 .. lo0 + 8 (`Rng::word0` before the mixer:
/// lo * g0 + (a0 ^ hi)); element lo0 + j + lane has `weyl8 + j * g0`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn weyl8(k: &K, lo0: u32, hi: u32) -> __m256i {
    let lo = _mm256_add_epi32(_mm256_set1_epi32(lo0 as i32), k.step);
    // SAFETY: avx2 is enabled for this function.
    unsafe { crate::round::weyl_x8(lo, k.a0 ^ hi, k.g0) }
}

/// The low random words of the 8 elements whose Weyl values are `weyl` ([`weyl8`],
/// advanced by 8 steps, `8 * g0`, for each next 8 elements).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn rand8(weyl: __m256i) -> __m256i {
    // SAFETY: avx2 is enabled for this function.
    unsafe { crate::round::mix32_x8(weyl) }
}

/// `pos` where the lane is non-negative, `pos ^ x` where `neg` is all ones.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pick(neg: __m256i, pos: __m256i, x: __m256i) -> __m256i {
    _mm256_xor_si256(pos, _mm256_and_si256(neg, x))
}

/// 8 f32 (as bits) to 8 codes in 32-bit lanes; [`encode_lane`] on each lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn enc8<const MODE: u8>(k: &K, x: __m256i, rand: __m256i) -> __m256i {
    // All ones in negative lanes (arithmetic shift copies the sign).
    let neg = _mm256_srai_epi32::<31>(x);
    let a = _mm256_and_si256(x, k.abs);
    let ef = _mm256_srli_epi32::<23>(a);
    // f32 subnormals scale like exponent field 1.
    let ef1 = _mm256_max_epi32(ef, k.one);
    // Remove the exponent but keep the hidden bit: a - (ef1 - 1) << 23.
    let mant = _mm256_sub_epi32(a, _mm256_slli_epi32::<23>(_mm256_sub_epi32(ef1, k.one)));
    // Bits below the target's unit: base_sh, plus the steps below its normal range.
    let sh = _mm256_max_epi32(_mm256_sub_epi32(k.tmin_sh, ef1), k.base_sh);
    // Variable shifts give 0 for counts >= 32 (negative counts are huge unsigned).
    let kt = _mm256_srlv_epi32(mant, sh);
    // The remainder as a 32-bit fraction of one unit: left-align the low sh bits
    // (sh <= 32), or shift the whole mantissa down (sh >= 32).
    let frac = || _mm256_or_si256(_mm256_sllv_epi32(mant, _mm256_sub_epi32(k.c32, sh)), _mm256_srlv_epi32(mant, _mm256_sub_epi32(sh, k.c32)));
    // 2^(sh-1) - 1, half a unit less one (0 for sh > 32; mant < 2^24 keeps the sums below 2^32).
    let half_m1 = || _mm256_srlv_epi32(k.abs, _mm256_sub_epi32(k.c32, sh));
    // The remainder is nonzero exactly when shifting kt back does not give mant.
    let inexact = || _mm256_xor_si256(_mm256_cmpeq_epi32(_mm256_sllv_epi32(kt, sh), mant), _mm256_set1_epi32(-1));
    // All ones where kt is odd.
    let odd = || _mm256_srai_epi32::<31>(_mm256_slli_epi32::<31>(kt));
    // The rounded magnitude in units: kt plus one where rounding goes up.
    let kr = match MODE {
        // Ties to even: (mant + half - 1 + (kt & 1)) >> sh rounds half up only when kt is odd.
        NE => _mm256_srlv_epi32(_mm256_add_epi32(_mm256_add_epi32(mant, half_m1()), _mm256_and_si256(kt, k.one)), sh),
        // Ties away: (mant + half) >> sh.
        NA => _mm256_srlv_epi32(_mm256_add_epi32(_mm256_add_epi32(mant, half_m1()), k.one), sh),
        RZ => kt,
        // The masks below are -1 where rounding up: subtracting them adds one.
        UP => _mm256_sub_epi32(kt, _mm256_andnot_si256(neg, inexact())),
        DN => _mm256_sub_epi32(kt, _mm256_and_si256(neg, inexact())),
        ODD => _mm256_sub_epi32(kt, _mm256_andnot_si256(odd(), inexact())),
        _ => {
            // Unsigned rand < frac on the top rbits bits (top bits flipped for a signed compare).
            let r = _mm256_xor_si256(_mm256_and_si256(rand, k.rmask), k.half);
            let f = _mm256_xor_si256(_mm256_and_si256(frac(), k.rmask), k.half);
            _mm256_sub_epi32(kt, _mm256_cmpgt_epi32(f, r))
        }
    };
    // Exponent steps above the smallest normal, in units of 2^m codes.
    let base = _mm256_sll_epi32(_mm256_max_epi32(_mm256_sub_epi32(ef1, k.tmin), k.zero), k.m);
    let code = _mm256_add_epi32(base, kr);
    // Sign bit in negative lanes, except on a fnuz zero (fnuz has no -0):
    // code > sign_floor is always true (floor -1), or for fnuz code != 0 (floor 0).
    let keep_sign = _mm256_and_si256(neg, _mm256_cmpgt_epi32(code, k.sign_floor));
    let signed = _mm256_or_si256(code, _mm256_and_si256(keep_sign, k.sign_bit));
    // Codes stay below 2^31 here, so signed compares are exact.
    let ovf = _mm256_cmpgt_epi32(code, k.max_code);
    let r = _mm256_blendv_epi8(signed, pick(neg, k.ovf_p, k.ovf_x), ovf);
    let r = _mm256_blendv_epi8(r, pick(neg, k.inf_p, k.inf_x), _mm256_cmpeq_epi32(a, k.exp_inf));
    _mm256_blendv_epi8(r, pick(neg, k.nan_p, k.nan_x), _mm256_cmpgt_epi32(a, k.exp_inf))
}

/// Pseudo-mode of [`encode_loop`]: nearest-even through [`near8`].
pub(super) const NEF: u8 = 7;

/// Nearest-even, for plans of kind [`Kind::Near`]: 8 f32 (as bits) to 8 codes,
/// the same codes as `enc8::<NE>` with fewer operations. Normal results round
/// in the integer domain (add half a unit less one plus the kept lowest bit,
/// shift, rebias); subnormal results scale exactly by 2^(m - emin) and round
/// to an integer with an explicit nearest-even rounding (whatever MXCSR says).
/// Infinite inputs land above max_code and take the overflow value, which
/// the plan checks equals the infinity value.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn near8(k: &K, x: __m256i) -> __m256i {
    let neg = _mm256_srai_epi32::<31>(x);
    let a = _mm256_and_si256(x, k.abs);
    let lsb = _mm256_and_si256(_mm256_srl_epi32(a, k.base_sh_x), k.one);
    let normal = _mm256_srl_epi32(_mm256_add_epi32(_mm256_add_epi32(a, k.near_half), lsb), k.base_sh_x);
    let normal = _mm256_sub_epi32(normal, k.near_rebias);
    let scaled = _mm256_mul_ps(_mm256_castsi256_ps(a), k.sub_up);
    let sub = _mm256_cvttps_epi32(_mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(scaled));
    let code = _mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi32(k.sub_lim, a));
    let keep_sign = _mm256_and_si256(neg, _mm256_cmpgt_epi32(code, k.sign_floor));
    let signed = _mm256_or_si256(code, _mm256_and_si256(keep_sign, k.sign_bit));
    let r = _mm256_blendv_epi8(signed, pick(neg, k.ovf_p, k.ovf_x), _mm256_cmpgt_epi32(code, k.max_code));
    _mm256_blendv_epi8(r, pick(neg, k.nan_p, k.nan_x), _mm256_cmpgt_epi32(a, k.exp_inf))
}

/// Pseudo-mode of [`encode_loop`]: stochastic through [`sr8`].
pub(super) const SRF: u8 = 8;

/// Stochastic rounding for plans of kind [`Kind::StochShift`]: the codes of
/// `enc8::<SR>`. When no lane is subnormal in the target, the remainder is
/// the low base_sh bits L of x; with R the top bits of the random word, both
/// cut to the compared bits, the reference rounds up when R < L, and adding
/// the complement of R to x carries into the kept bits exactly then.
/// Vectors with a subnormal lane take the generic lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sr8(k: &K, x: __m256i, rand: __m256i) -> __m256i {
    let a = _mm256_and_si256(x, k.abs);
    if _mm256_movemask_epi8(_mm256_cmpgt_epi32(k.sub_lim, a)) != 0 {
        return enc8::<SR>(k, x, rand);
    }
    let neg = _mm256_srai_epi32::<31>(x);
    // (max - R) on the compared bits: the complement of R's top base_sh bits, masked.
    let add = _mm256_andnot_si256(_mm256_srl_epi32(rand, k.sr_rsh), k.sr_low);
    let code = _mm256_srl_epi32(_mm256_add_epi32(_mm256_and_si256(a, k.sr_keep), add), k.base_sh_x);
    let code = _mm256_sub_epi32(code, k.near_rebias);
    let keep_sign = _mm256_and_si256(neg, _mm256_cmpgt_epi32(code, k.sign_floor));
    let signed = _mm256_or_si256(code, _mm256_and_si256(keep_sign, k.sign_bit));
    let r = _mm256_blendv_epi8(signed, pick(neg, k.ovf_p, k.ovf_x), _mm256_cmpgt_epi32(code, k.max_code));
    _mm256_blendv_epi8(r, pick(neg, k.nan_p, k.nan_x), _mm256_cmpgt_epi32(a, k.exp_inf))
}

/// Does the (pseudo-)mode draw random bits?
const fn is_sr(mode: u8) -> bool {
    mode == SR || mode == SRF || mode == BSR
}

/// The scalar lane computing what the vector lane of a (pseudo-)mode computes.
#[inline(always)]
fn scalar_lane<const MODE: u8>(p: &Params, x: u32, rand: u32) -> u32 {
    match MODE {
        NEF | BNE => encode_lane::<NE>(p, x, 0),
        SRF | BSR => encode_lane::<SR>(p, x, rand),
        _ => encode_lane::<MODE>(p, x, rand),
    }
}

/// Pseudo-modes of [`encode_loop`]: bfloat16 nearest-even and stochastic.
pub(super) const BNE: u8 = 9;
pub(super) const BSR: u8 = 10;

/// bfloat16, nearest-even: add 0x7fff plus the kept part's lowest bit, keep
/// the top 16 bits (overflow carries into the exponent and gives inf). NaN
/// lanes take the format's NaN.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bf16ne8(k: &K, x: __m256i) -> __m256i {
    let neg = _mm256_srai_epi32::<31>(x);
    let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(x), k.one);
    let r = _mm256_srli_epi32::<16>(_mm256_add_epi32(_mm256_add_epi32(x, k.bf_half), lsb));
    let nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, k.abs), k.exp_inf);
    _mm256_and_si256(_mm256_blendv_epi8(r, pick(neg, k.nan_p, k.nan_x), nan), k.bf_low16)
}

/// bfloat16, stochastic. With L the low 16 bits of x and R the element's
/// random bits, both cut to their top `rbits` bits (of 16), the reference
/// rounds up when R < L; adding the complement (max - R) to x carries into
/// bit 16 exactly then. Overflow carries into inf as the mode requires.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bf16sr8(k: &K, x: __m256i, rand: __m256i) -> __m256i {
    let neg = _mm256_srai_epi32::<31>(x);
    // (max - R) on the compared bits: the complement of R's top 16 bits, masked.
    let add = _mm256_andnot_si256(_mm256_srli_epi32::<16>(rand), k.bf_m16);
    let c = _mm256_srli_epi32::<16>(_mm256_add_epi32(_mm256_and_si256(x, k.bf_keep), add));
    let nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, k.abs), k.exp_inf);
    _mm256_and_si256(_mm256_blendv_epi8(c, pick(neg, k.nan_p, k.nan_x), nan), k.bf_low16)
}

/// The vector lane of a (pseudo-)mode.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lane8<const MODE: u8>(k: &K, x: __m256i, rand: __m256i) -> __m256i {
    if MODE == NEF {
        near8(k, x)
    } else if MODE == SRF {
        sr8(k, x, rand)
    } else if MODE == BNE {
        bf16ne8(k, x)
    } else if MODE == BSR {
        bf16sr8(k, x, rand)
    } else {
        enc8::<MODE>(k, x, rand)
    }
}

/// 8 codes (32-bit lanes) to f32 bits; [`decode_lane`] on each lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dec8(k: &K, code: __m256i) -> __m256i {
    let sign = _mm256_sll_epi32(_mm256_and_si256(code, k.sign_bit), k.sign_to_31);
    let mag = _mm256_and_si256(code, k.mag_mask);
    // Normal: the code's exponent and mantissa, shifted into place and rebiased.
    let normal = _mm256_add_epi32(_mm256_sll_epi32(mag, k.base_sh_x), k.rebias);
    // Subnormal: the integer times the unit (exact).
    // Only subnormal lanes multiply a nonzero integer (no needless f32 subnormals).
    let is_sub = _mm256_cmpgt_epi32(k.m_unit, mag);
    let sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(mag, is_sub)), k.sub_scale));
    let fin = _mm256_blendv_epi8(normal, sub, is_sub);
    // Above max_code: inf at inf_mag, NaN elsewhere (mag < 2^31: signed compares).
    let special = _mm256_blendv_epi8(k.qnan, k.inf_f32, _mm256_cmpeq_epi32(mag, k.inf_mag));
    let big = _mm256_cmpgt_epi32(mag, k.max_code);
    let r = _mm256_blendv_epi8(fin, special, big);
    let r = _mm256_blendv_epi8(r, k.qnan, _mm256_cmpeq_epi32(code, k.fnuz_nan));
    _mm256_or_si256(r, sign)
}


/// Store 32 bytes: streaming (non-temporal, `p` 32-byte aligned) or plain.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn put(p: *mut __m256i, v: __m256i, nt: bool) {
    // SAFETY: the caller passes a valid pointer, 32-byte aligned when nt.
    unsafe {
        if nt {
            _mm256_stream_si256(p, v)
        } else {
            _mm256_storeu_si256(p, v)
        }
    }
}

/// Run `f(a, b, stream)` over `[0, n)`: with `nt`, a scalar head up to the
/// first 32-byte boundary of `dst`, then the rest with streaming stores
/// (which bypass the caches: large outputs are not read back soon, and
/// fresh pages need no read for ownership), then a store fence.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn streamed<T>(dst: *const T, n: usize, nt: bool, mut f: impl FnMut(usize, usize, bool)) {
    let addr = dst as usize;
    let elem = std::mem::size_of::<T>();
    if !nt || !addr.is_multiple_of(elem) {
        f(0, n, false);
        return;
    }
    let h = ((32 - addr % 32) % 32 / elem).min(n);
    if h > 0 {
        f(0, h, false);
    }
    f(h, n, true);
    // Streaming stores are weakly ordered: fence before the results are handed on.
    _mm_sfence();
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load8(p: &[f32]) -> __m256i {
    debug_assert!(p.len() >= 8);
    // SAFETY: p holds at least 8 f32 (callers step in whole vectors).
    unsafe { _mm256_loadu_si256(p.as_ptr() as *const __m256i) }
}

/// Encode f32 into codes of the plan's format. `i0` is the index of `src[0]`;
/// the upper 32 bits of the indices are constant over the call.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn encode<C: Code>(p: &Params, mode: Mode, kind: Kind, src: &[f32], dst: &mut [C], i0: u64, nt: bool) {
    let ptr = dst.as_ptr();
    streamed(ptr, src.len(), nt, |a, b, nt| encode_part(p, mode, kind, &src[a..b], &mut dst[a..b], i0 + a as u64, nt));
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn encode_part<C: Code>(p: &Params, mode: Mode, kind: Kind, src: &[f32], dst: &mut [C], i0: u64, nt: bool) {
    match (kind, C::BYTES) {
        (Kind::Bf16Ne, _) => return encode_loop::<C, BNE>(p, src, dst, i0, nt),
        (Kind::Bf16Sr, _) => return encode_loop::<C, BSR>(p, src, dst, i0, nt),
        (Kind::Near, _) => return encode_loop::<C, NEF>(p, src, dst, i0, nt),
        (Kind::StochShift, _) => return encode_loop::<C, SRF>(p, src, dst, i0, nt),
        (Kind::F16c, 2) => {
            return match mode {
                Mode::TowardZero => f16c::<{ _MM_FROUND_TO_ZERO }>(p, src, as_u16(dst), nt),
                Mode::Up => f16c::<{ _MM_FROUND_TO_POS_INF }>(p, src, as_u16(dst), nt),
                Mode::Down => f16c::<{ _MM_FROUND_TO_NEG_INF }>(p, src, as_u16(dst), nt),
                _ => f16c::<{ _MM_FROUND_TO_NEAREST_INT }>(p, src, as_u16(dst), nt),
            }
        }
        _ => {}
    }
    match mode {
        Mode::NearestEven => encode_loop::<C, NE>(p, src, dst, i0, nt),
        Mode::NearestAway => encode_loop::<C, NA>(p, src, dst, i0, nt),
        Mode::TowardZero => encode_loop::<C, RZ>(p, src, dst, i0, nt),
        Mode::Up => encode_loop::<C, UP>(p, src, dst, i0, nt),
        Mode::Down => encode_loop::<C, DN>(p, src, dst, i0, nt),
        Mode::Odd => encode_loop::<C, ODD>(p, src, dst, i0, nt),
        Mode::Stochastic => encode_loop::<C, SR>(p, src, dst, i0, nt),
    }
}

fn as_u16<C: Code>(d: &mut [C]) -> &mut [u16] {
    assert_eq!(C::BYTES, 2);
    // SAFETY: C is a 2-byte unsigned integer (Code is implemented for u8..u64 only).
    unsafe { std::slice::from_raw_parts_mut(d.as_mut_ptr() as *mut u16, d.len()) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn encode_loop<C: Code, const MODE: u8>(p: &Params, src: &[f32], dst: &mut [C], i0: u64, nt: bool) {
    let k = consts(p);
    let hi_s = p.rng.hi_word(i0);
    let lo0 = i0 as u32;
    let mut weyl = weyl8(&k, lo0, hi_s);
    let n = src.len();
    // Random words for the next 8 lanes (the calls go through the elements in order,
    // 8 at a time): the Weyl values advance by 8 steps.
    let step8 = _mm256_set1_epi32(8u32.wrapping_mul(k.g0) as i32);
    let mut next_rand = || {
        if is_sr(MODE) {
            let r = rand8(weyl);
            weyl = _mm256_add_epi32(weyl, step8);
            r
        } else {
            k.zero
        }
    };
    let mut j = 0;
    match C::BYTES {
        1 => {
            let d = dst.as_mut_ptr() as *mut u8;
            // Four vectors of 8 codes packed into 32 bytes.
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            while j + 32 <= n {
                let s = &src[j..j + 32];
                let c0 = lane8::<MODE>(&k, load8(&s[0..]), next_rand());
                let c1 = lane8::<MODE>(&k, load8(&s[8..]), next_rand());
                let c2 = lane8::<MODE>(&k, load8(&s[16..]), next_rand());
                let c3 = lane8::<MODE>(&k, load8(&s[24..]), next_rand());
                // Codes are < 256: the saturating packs are plain narrowing; they
                // interleave 128-bit halves, which the permute puts back in order.
                let w = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
                let w = _mm256_permutevar8x32_epi32(w, order);
                // SAFETY: j + 32 <= n = dst.len(); aligned when nt (see `streamed`).
                unsafe { put(d.add(j) as *mut __m256i, w, nt) };
                j += 32;
            }
        }
        2 => {
            let d = dst.as_mut_ptr() as *mut u16;
            while j + 16 <= n {
                let s = &src[j..j + 16];
                let c0 = lane8::<MODE>(&k, load8(&s[0..]), next_rand());
                let c1 = lane8::<MODE>(&k, load8(&s[8..]), next_rand());
                // Codes are < 2^16: narrowing pack, then restore the order of the 64-bit quarters.
                let w = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(c0, c1));
                // SAFETY: j + 16 <= n = dst.len(); aligned when nt (see `streamed`).
                unsafe { put(d.add(j) as *mut __m256i, w, nt) };
                j += 16;
            }
        }
        4 => {
            let d = dst.as_mut_ptr() as *mut u32;
            while j + 8 <= n {
                let c = lane8::<MODE>(&k, load8(&src[j..]), next_rand());
                // SAFETY: j + 8 <= n = dst.len(); aligned when nt (see `streamed`).
                unsafe { put(d.add(j) as *mut __m256i, c, nt) };
                j += 8;
            }
        }
        _ => {}
    }
    for (jj, (x, y)) in src[j..].iter().zip(dst[j..].iter_mut()).enumerate() {
        let idx = lo0.wrapping_add((j + jj) as u32);
        let rand = if is_sr(MODE) { p.rng.word0(idx, hi_s) } else { 0 };
        let c = scalar_lane::<MODE>(p, x.to_bits(), rand);
        *y = C::from_u32(c);
    }
}

/// float16 through F16C's conversion in rounding mode `R` (an IEEE
/// conversion: exact rounding, subnormals, overflow as IEEE prescribes for
/// the mode). NaN keeps its sign and quiet bit but loses its payload, as the
/// reference does.
#[target_feature(enable = "avx2,fma,f16c")]
fn f16c<const R: i32>(p: &Params, src: &[f32], dst: &mut [u16], nt: bool) {
    let abs16 = _mm256_set1_epi16(0x7fff);
    let inf16 = _mm256_set1_epi16(0x7c00);
    let payload = _mm256_set1_epi16(0x01ff);
    let n = src.len();
    let mut j = 0;
    while j + 16 <= n {
        // SAFETY: j + 16 <= n = src.len().
        let (v0, v1) = unsafe { (_mm256_loadu_ps(src.as_ptr().add(j)), _mm256_loadu_ps(src.as_ptr().add(j + 8))) };
        let h = _mm256_set_m128i(_mm256_cvtps_ph::<R>(v1), _mm256_cvtps_ph::<R>(v0));
        // NaN results (magnitude above inf's) drop the payload below the quiet bit.
        let nan = _mm256_cmpgt_epi16(_mm256_and_si256(h, abs16), inf16);
        let h = _mm256_andnot_si256(_mm256_and_si256(nan, payload), h);
        // SAFETY: j + 16 <= n = dst.len(); aligned when nt (see `streamed`).
        unsafe { put(dst.as_mut_ptr().add(j) as *mut __m256i, h, nt) };
        j += 16;
    }
    let tail = |x: u32| match R {
        _MM_FROUND_TO_ZERO => encode_lane::<RZ>(p, x, 0),
        _MM_FROUND_TO_POS_INF => encode_lane::<UP>(p, x, 0),
        _MM_FROUND_TO_NEG_INF => encode_lane::<DN>(p, x, 0),
        _ => encode_lane::<NE>(p, x, 0),
    };
    for (x, y) in src[j..].iter().zip(dst[j..].iter_mut()) {
        *y = tail(x.to_bits()) as u16;
    }
}

/// Round f32 values to values of the format (encode, then decode).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn round(p: &Params, mode: Mode, kind: Kind, src: &[f32], dst: &mut [f32], i0: u64, nt: bool) {
    let ptr = dst.as_ptr();
    streamed(ptr, src.len(), nt, |a, b, nt| {
        let (s, d, i) = (&src[a..b], &mut dst[a..b], i0 + a as u64);
        match (kind, mode) {
            (Kind::Bf16Ne, _) => round_loop::<BNE>(p, s, d, i, nt),
            (Kind::Bf16Sr, _) => round_loop::<BSR>(p, s, d, i, nt),
            (Kind::Near, _) => round_loop::<NEF>(p, s, d, i, nt),
            (Kind::StochShift, _) => round_loop::<SRF>(p, s, d, i, nt),
            (_, Mode::NearestEven) => round_loop::<NE>(p, s, d, i, nt),
            (_, Mode::NearestAway) => round_loop::<NA>(p, s, d, i, nt),
            (_, Mode::TowardZero) => round_loop::<RZ>(p, s, d, i, nt),
            (_, Mode::Up) => round_loop::<UP>(p, s, d, i, nt),
            (_, Mode::Down) => round_loop::<DN>(p, s, d, i, nt),
            (_, Mode::Odd) => round_loop::<ODD>(p, s, d, i, nt),
            (_, Mode::Stochastic) => round_loop::<SR>(p, s, d, i, nt),
        }
    });
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn round_loop<const MODE: u8>(p: &Params, src: &[f32], dst: &mut [f32], i0: u64, nt: bool) {
    let k = consts(p);
    let hi_s = p.rng.hi_word(i0);
    let lo0 = i0 as u32;
    let mut weyl = weyl8(&k, lo0, hi_s);
    let step8 = _mm256_set1_epi32(8u32.wrapping_mul(k.g0) as i32);
    let n = src.len();
    let mut j = 0;
    while j + 8 <= n {
        let rand = if is_sr(MODE) { rand8(weyl) } else { k.zero };
        weyl = _mm256_add_epi32(weyl, step8);
        let v = dec8(&k, lane8::<MODE>(&k, load8(&src[j..]), rand));
        // SAFETY: j + 8 <= n = dst.len(); aligned when nt (see `streamed`).
        unsafe { put(dst.as_mut_ptr().add(j) as *mut __m256i, v, nt) };
        j += 8;
    }
    for (jj, (x, y)) in src[j..].iter().zip(dst[j..].iter_mut()).enumerate() {
        let rand = if is_sr(MODE) { p.rng.word0(lo0.wrapping_add((j + jj) as u32), hi_s) } else { 0 };
        *y = f32::from_bits(decode_lane(p, scalar_lane::<MODE>(p, x.to_bits(), rand)));
    }
}

/// Decode codes of a format whose values all are f32 values, arithmetically.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn decode<C: Code>(p: &Params, src: &[C], dst: &mut [f32], nt: bool) {
    let ptr = dst.as_ptr();
    streamed(ptr, src.len(), nt, |a, b, nt| decode_part(p, &src[a..b], &mut dst[a..b], nt));
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn decode_part<C: Code>(p: &Params, src: &[C], dst: &mut [f32], nt: bool) {
    let k = consts(p);
    let n = src.len();
    let mut j = 0;
    let out = dst.as_mut_ptr() as *mut __m256i;
    match C::BYTES {
        1 => {
            let s = src.as_ptr() as *const u8;
            while j + 32 <= n {
                // SAFETY: j + 32 <= n = src.len() = dst.len(); aligned when nt (see `streamed`).
                unsafe {
                    let b = _mm256_loadu_si256(s.add(j) as *const __m256i);
                    let lo = _mm256_castsi256_si128(b);
                    let hi = _mm256_extracti128_si256::<1>(b);
                    let q = [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)];
                    for (t, &h) in q.iter().enumerate() {
                        let v = dec8(&k, _mm256_and_si256(_mm256_cvtepu8_epi32(h), k.code_mask));
                        put(out.add(j / 8 + t), v, nt);
                    }
                }
                j += 32;
            }
        }
        2 => {
            let s = src.as_ptr() as *const u16;
            while j + 8 <= n {
                // SAFETY: j + 8 <= n = src.len() = dst.len(); aligned when nt (see `streamed`).
                unsafe {
                    let h = _mm_loadu_si128(s.add(j) as *const __m128i);
                    let c = _mm256_and_si256(_mm256_cvtepu16_epi32(h), k.code_mask);
                    put(out.add(j / 8), dec8(&k, c), nt);
                }
                j += 8;
            }
        }
        _ => {}
    }
    for (c, y) in src[j..].iter().zip(dst[j..].iter_mut()) {
        *y = f32::from_bits(decode_lane(p, c.to_u64() as u32 & (p.mag_mask | p.sign_bit)));
    }
}

/// float16 to f32 through F16C (exact); NaN becomes the quiet NaN of its sign
/// without payload, as the reference decodes it.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn decode_f16<C: Code>(src: &[C], dst: &mut [f32], nt: bool) {
    let ptr = dst.as_ptr();
    streamed(ptr, src.len(), nt, |a, b, nt| decode_f16_part(&src[a..b], &mut dst[a..b], nt));
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn decode_f16_part<C: Code>(src: &[C], dst: &mut [f32], nt: bool) {
    assert_eq!(C::BYTES, 2);
    let s = src.as_ptr() as *const u16;
    let payload = _mm256_set1_epi32(0x003f_ffff);
    let n = src.len();
    let mut j = 0;
    while j + 8 <= n {
        // SAFETY: j + 8 <= n = src.len() = dst.len(); aligned when nt (see `streamed`).
        unsafe {
            let v = _mm256_cvtph_ps(_mm_loadu_si128(s.add(j) as *const __m128i));
            let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
            let v = _mm256_andnot_si256(_mm256_and_si256(nan, payload), _mm256_castps_si256(v));
            put(dst.as_mut_ptr().add(j) as *mut __m256i, v, nt);
        }
        j += 8;
    }
    for (c, y) in src[j..].iter().zip(dst[j..].iter_mut()) {
        let f = crate::format::named::FLOAT16.decode(c.to_u64());
        *y = f as f32;
    }
}

/// bfloat16 to f32: the code is the f32's top half; NaN becomes the quiet NaN
/// of its sign without payload, as the reference decodes it.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn decode_bf16<C: Code>(src: &[C], dst: &mut [f32], nt: bool) {
    if C::BYTES != 2 {
        return super::fast::decode_bf16(src, dst);
    }
    let ptr = dst.as_ptr();
    streamed(ptr, src.len(), nt, |a, b, nt| {
        let (src, dst) = (&src[a..b], &mut dst[a..b]);
        let s = src.as_ptr() as *const u16;
        let abs = _mm256_set1_epi32(0x7fff_ffff);
        let inf = _mm256_set1_epi32(0x7f80_0000);
        let payload = _mm256_set1_epi32(0x003f_ffff);
        let n = src.len();
        let mut j = 0;
        while j + 8 <= n {
            // SAFETY: j + 8 <= n = src.len() = dst.len(); aligned when nt (see `streamed`).
            unsafe {
                let v = _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(s.add(j) as *const __m128i)));
                // NaN (magnitude above inf's): set the quiet bit, clear the payload below it.
                let nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, abs), inf);
                let q = _mm256_or_si256(_mm256_andnot_si256(payload, v), _mm256_set1_epi32(0x0040_0000));
                put(dst.as_mut_ptr().add(j) as *mut __m256i, _mm256_blendv_epi8(v, q, nan), nt);
            }
            j += 8;
        }
        super::fast::decode_bf16(&src[j..], &mut dst[j..]);
    });
}
