//! Counter-based random bits for stochastic rounding.
//!
//! The bits for element `i` are a pure function of `(seed, i)`, so results never
//! depend on thread count, chunking or SIMD width. A random word is the
//! "lowbias32" avalanche mixer applied to a Weyl sequence, `mix32(lo * G + k)`
//! (the counter-based form of SplitMix), with `k` from the seed and the high
//! half of the index. It is built from 32-bit multiplies, adds and
//! xor-shifts only, so the AVX2 path (`vpmulld`) computes exactly what the
//! scalar path computes.

/// A 64-bit seed expanded into the constants of the hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SeedKey {
    /// Key of the low random word (`b0` is spare).
    pub a0: u32,
    pub b0: u32,
    /// Key of the high random word, drawn only beyond 32 bits (`b1` is spare).
    pub a1: u32,
    pub b1: u32,
    /// Key mixed with the high 32 bits of the element index.
    pub c: u32,
}

/// splitmix64: expands a seed into well-mixed, distinct key words.
#[inline]
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl SeedKey {
    pub fn from_seed(seed: u64) -> Self {
        let mut s = seed;
        let w0 = splitmix64(&mut s);
        let w1 = splitmix64(&mut s);
        let w2 = splitmix64(&mut s);
        SeedKey { a0: w0 as u32, b0: (w0 >> 32) as u32, a1: w1 as u32, b1: (w1 >> 32) as u32, c: w2 as u32 }
    }
}

/// The Weyl step: 2^32 / golden ratio, odd.
pub const GAMMA: u32 = 0x9E37_79B9;

/// A 32-bit avalanche mixer (xor-shift-multiply, "lowbias32" constants).
#[inline(always)]
pub fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// `mix32` on 8 u32 lanes: the same steps (`vpmulld` keeps the low 32 bits).
///
/// # Safety
/// The CPU must support avx2.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn mix32_x8(x: std::arch::x86_64::__m256i) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: avx2 per the caller.
    unsafe {
        let x = _mm256_xor_si256(x, _mm256_srli_epi32::<16>(x));
        let x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb_352d));
        let x = _mm256_xor_si256(x, _mm256_srli_epi32::<15>(x));
        let x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x846c_a68b_u32 as i32));
        _mm256_xor_si256(x, _mm256_srli_epi32::<16>(x))
    }
}

/// [`Rng::weyl0`] on 8 u32 lanes of low index words, `key = a0 ^ hi`.
///
/// # Safety
/// The CPU must support avx2.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn weyl_x8(lo: std::arch::x86_64::__m256i, key: u32) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: avx2 per the caller.
    unsafe { _mm256_add_epi32(_mm256_mullo_epi32(lo, _mm256_set1_epi32(GAMMA as i32)), _mm256_set1_epi32(key as i32)) }
}

/// The random stream of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rng {
    pub key: SeedKey,
}

impl Rng {
    pub fn new(key: SeedKey) -> Self {
        Rng { key }
    }

    /// Mixed high half of the index: constant across any run of indices that
    /// share their upper 32 bits, so vector loops hoist it.
    #[inline(always)]
    pub fn hi_word(&self, i: u64) -> u32 {
        mix32(((i >> 32) as u32) ^ self.key.c)
    }

    /// The Weyl value behind [`Rng::word0`]: `lo * GAMMA + (a0 ^ hi)`. The next
    /// element's is GAMMA more, so vector loops advance it with an add.
    #[inline(always)]
    pub fn weyl0(&self, lo: u32, hi: u32) -> u32 {
        lo.wrapping_mul(GAMMA).wrapping_add(self.key.a0 ^ hi)
    }

    /// The low random word of element `i`, given `lo = i as u32` and `hi = self.hi_word(i)`.
    #[inline(always)]
    pub fn word0(&self, lo: u32, hi: u32) -> u32 {
        mix32(self.weyl0(lo, hi))
    }

    /// The high random word: [`Rng::word0`] with key `a1`.
    #[inline(always)]
    fn word1(&self, lo: u32, hi: u32) -> u32 {
        mix32(lo.wrapping_mul(GAMMA).wrapping_add(self.key.a1 ^ hi))
    }

    /// `rbits` (1..=64) uniformly random bits for element `i`, in the low bits.
    /// With `rbits <= 32` they are the top bits of `word0`; beyond, `word1`
    /// supplies the upper half.
    #[inline(always)]
    pub fn bits(&self, i: u64, rbits: u32) -> u64 {
        let hi = self.hi_word(i);
        let lo = i as u32;
        let w0 = self.word0(lo, hi);
        if rbits <= 32 {
            (w0 >> (32 - rbits)) as u64
        } else {
            let w = ((self.word1(lo, hi) as u64) << 32) | w0 as u64;
            w >> (64 - rbits)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_seed_dependent() {
        let a = Rng::new(SeedKey::from_seed(1));
        let b = Rng::new(SeedKey::from_seed(2));
        assert_eq!(a.bits(12345, 64), a.bits(12345, 64));
        assert_ne!(a.bits(12345, 64), b.bits(12345, 64));
        assert_eq!(a.bits(7, 8), a.bits(7, 32) >> 24);
    }

    #[test]
    fn roughly_uniform_bits() {
        let r = Rng::new(SeedKey::from_seed(42));
        let n = 1u64 << 16;
        let mut ones = [0u32; 64];
        for i in 0..n {
            let w = r.bits(i, 64);
            for (b, c) in ones.iter_mut().enumerate() {
                *c += ((w >> b) & 1) as u32;
            }
        }
        // Each bit is Bernoulli(1/2): 6 sigma = 6 * 128 = 768.
        for c in ones {
            assert!((c as i64 - (n / 2) as i64).abs() < 768, "{c}");
        }
    }

    /// Chi-square statistic of `counts` against a uniform expectation.
    fn chi2(counts: &[u64], n: u64) -> f64 {
        let e = n as f64 / counts.len() as f64;
        counts.iter().map(|&c| (c as f64 - e).powi(2) / e).sum()
    }

    #[test]
    fn neighbours_independent() {
        // Pairs of consecutive elements (also across the 2^32 boundary of the low
        // index word), top 5 bits of each: 1024 cells, uniform. The statistic has
        // mean 1023 and sd 45; 1023 + 6 sd bounds it.
        for (seed, start) in [(0u64, 0u64), (1, 1 << 20), (0xdead_beef, (1 << 32) - (1 << 19))] {
            let r = Rng::new(SeedKey::from_seed(seed));
            let n = 1u64 << 20;
            let mut cells = vec![0u64; 1024];
            let mut prev = r.bits(start, 32);
            let (mut sxy, mut sx, mut sxx) = (0f64, 0f64, 0f64);
            for i in start + 1..=start + n {
                let w = r.bits(i, 32);
                cells[((prev >> 27) << 5 | (w >> 27)) as usize] += 1;
                let (x, y) = (prev as f64 / 2f64.powi(32) - 0.5, w as f64 / 2f64.powi(32) - 0.5);
                sxy += x * y;
                sx += x;
                sxx += x * x;
                prev = w;
            }
            let c = chi2(&cells, n);
            assert!(c < 1023.0 + 6.0 * 45.3, "seed {seed}: chi2 {c}");
            // Lag-1 correlation: sd 1/sqrt(n) ~ 0.001.
            let nf = n as f64;
            let corr = (sxy / nf - (sx / nf).powi(2)) / (sxx / nf - (sx / nf).powi(2));
            assert!(corr.abs() < 0.006, "seed {seed}: lag-1 correlation {corr}");
        }
    }

    #[test]
    fn seeds_independent() {
        // The same element under neighbouring seeds: top 5 bits of each, 1024 cells.
        let n = 1u64 << 20;
        for s in [0u64, 7, 1 << 40] {
            let (a, b) = (Rng::new(SeedKey::from_seed(s)), Rng::new(SeedKey::from_seed(s + 1)));
            let mut cells = vec![0u64; 1024];
            for i in 0..n {
                cells[((a.bits(i, 32) >> 27) << 5 | (b.bits(i, 32) >> 27)) as usize] += 1;
            }
            let c = chi2(&cells, n);
            assert!(c < 1023.0 + 6.0 * 45.3, "seeds {s}, {}: chi2 {c}", s + 1);
        }
    }

    #[test]
    fn words_of_one_element_independent() {
        // The two 32-bit halves of a 64-bit draw: top 5 bits of each.
        let r = Rng::new(SeedKey::from_seed(99));
        let n = 1u64 << 20;
        let mut cells = vec![0u64; 1024];
        for i in 0..n {
            let w = r.bits(i, 64);
            cells[((w >> 59) << 5 | ((w >> 27) & 31)) as usize] += 1;
        }
        let c = chi2(&cells, n);
        assert!(c < 1023.0 + 6.0 * 45.3, "chi2 {c}");
    }
}
