//! Counter-based random bits for stochastic rounding.
//!
//! The bits for element `i` are a pure function of `(seed, i)`, so results never
//! depend on thread count, chunking or SIMD width. A random word is the
//! "lowbias32" avalanche mixer applied to a Weyl sequence, `mix32(lo * g + k)`
//! (the counter-based form of SplitMix), with `k` from the seed and the high
//! half of the index, and the odd step `g` from the seed too: with one step for
//! every seed, two seeds whose `k` differ by `m * g` would draw one sequence,
//! shifted by m elements (and any two seeds one of 2^32 sequences). It is built
//! from 32-bit multiplies, adds and xor-shifts only, so the AVX2 path
//! (`vpmulld`) computes exactly what the scalar path computes.

/// A 64-bit seed expanded into the constants of the hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeedKey {
    /// Key of the low random word (`b0`: of the columns' words of [`StepRand`]).
    pub a0: u32,
    pub b0: u32,
    /// Key of the high random word, drawn only beyond 32 bits (`b1`: as `b0`).
    pub a1: u32,
    pub b1: u32,
    /// Key mixed with the high 32 bits of the element index.
    pub c: u32,
    /// The Weyl steps (odd): of the elements' (and rows') words, and of the columns'.
    pub g0: u32,
    pub g1: u32,
}

impl Default for SeedKey {
    fn default() -> Self {
        SeedKey::from_seed(0)
    }
}

/// An odd Weyl step from 32 random bits: at least 12 of its 31 neighbouring bit
/// pairs differ (as SplitMix asks of its gammas; steps such as 1 or 2^31 + 1
/// would feed the mixer nearly consecutive or nearly constant values).
fn weyl_step(x: u32) -> u32 {
    let g = x | 1;
    if (g ^ (g >> 1)).count_ones() < 12 {
        g ^ 0xAAAA_AAAA
    } else {
        g
    }
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
        let g0 = weyl_step(w2 as u32);
        let mut g1 = weyl_step((w2 >> 32) as u32);
        if g1 == g0 {
            // (The columns' words must not be the rows' shifted.) g0 is odd, so this
            // flips bits 1 to 30 and leaves bit 0: either of weyl_step's results (the
            // value, or it xor 0xAAAA_AAAA) differs from g0.
            g1 = weyl_step(g0 ^ 0x5555_5554);
        }
        SeedKey { a0: w0 as u32, b0: (w0 >> 32) as u32, a1: w1 as u32, b1: (w1 >> 32) as u32, c: splitmix64(&mut s) as u32, g0, g1 }
    }
}

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

/// [`Rng::weyl0`] on 8 u32 lanes of low index words, `key = a0 ^ hi`, step `gamma`.
///
/// # Safety
/// The CPU must support avx2.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn weyl_x8(lo: std::arch::x86_64::__m256i, key: u32, gamma: u32) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: avx2 per the caller.
    unsafe { _mm256_add_epi32(_mm256_mullo_epi32(lo, _mm256_set1_epi32(gamma as i32)), _mm256_set1_epi32(key as i32)) }
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

    /// The Weyl step of the stream ([`SeedKey::g0`]).
    #[inline(always)]
    pub fn gamma(&self) -> u32 {
        self.key.g0
    }

    /// The Weyl value behind [`Rng::word0`]: `lo * g0 + (a0 ^ hi)`. The next
    /// element's is [`Rng::gamma`] more, so vector loops advance it with an add.
    #[inline(always)]
    pub fn weyl0(&self, lo: u32, hi: u32) -> u32 {
        lo.wrapping_mul(self.key.g0).wrapping_add(self.key.a0 ^ hi)
    }

    /// The low random word of element `i`, given `lo = i as u32` and `hi = self.hi_word(i)`.
    #[inline(always)]
    pub fn word0(&self, lo: u32, hi: u32) -> u32 {
        mix32(self.weyl0(lo, hi))
    }

    /// The high random word: [`Rng::word0`] with key `a1`.
    #[inline(always)]
    fn word1(&self, lo: u32, hi: u32) -> u32 {
        mix32(lo.wrapping_mul(self.key.g0).wrapping_add(self.key.a1 ^ hi))
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

    /// [`Rng::bits`] of 8 indices, in 8 u32 lanes when they share their high
    /// half and `rbits <= 32` (avx2).
    pub fn bits8(&self, idx: [u64; 8], rbits: u32) -> [u64; 8] {
        #[cfg(target_arch = "x86_64")]
        if rbits <= 32 && idx.iter().all(|&i| i >> 32 == idx[0] >> 32) && crate::convert::detected_isa() >= crate::convert::Isa::Avx2 {
            // SAFETY: avx2 was detected.
            let w = unsafe { self.words8_avx2(idx.map(|i| i as u32), self.hi_word(idx[0])) };
            return w.map(|w| (w >> (32 - rbits)) as u64);
        }
        idx.map(|i| self.bits(i, rbits))
    }

    /// `out[l]` = the word whose top `rbits` bits (at most 32) are
    /// [`Rng::bits`] of index `x0 + l * stride`, 8 at a time with AVX2.
    pub fn fill32(&self, x0: u64, stride: u64, out: &mut [u64]) {
        // Word 0 of index i is the word of the rows' side of `StepRand` under this key.
        Side { k0: self.key.a0, k1: self.key.a1, kc: self.key.c, gamma: self.key.g0 }.fill(x0, stride, 32, out)
    }

    /// [`Rng::word0`] of 8 low index words sharing the mixed high half `hi`.
    ///
    /// # Safety
    /// The CPU must support avx2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn words8_avx2(&self, lo: [u32; 8], hi: u32) -> [u32; 8] {
        use std::arch::x86_64::*;
        let mut w = [0u32; 8];
        // SAFETY: avx2 per the contract; 8 lanes each.
        unsafe {
            let x = weyl_x8(_mm256_loadu_si256(lo.as_ptr() as *const __m256i), self.key.a0 ^ hi, self.key.g0);
            _mm256_storeu_si256(w.as_mut_ptr() as *mut __m256i, mix32_x8(x));
        }
        w
    }
}

/// The random bits of the depth steps of an emulated product `C = A B` with
/// stochastic rounding. Step `t` of output element `(i, j)` draws the top
/// `rbits` bits of `row(i, t) ^ col(j, t)`: a word of row i of A's side and a
/// word of column j of B's side. A row's word is [`Rng::bits`]'s word of index
/// `i * steps + t` (its own key); a column's likewise of `j * steps + t`, with
/// its own key and Weyl step ([`SeedKey::g1`]). At most 32 bits use one mixed
/// word, more a second.
///
/// Every element's bits are uniform, and one element's steps draw independent
/// words. The words of any three elements are mutually independent; four
/// elements on the corners of a rectangle (rows i, i', columns j, j') have
/// words whose xor is zero at each step. So every pair of rounding errors is
/// uncorrelated, as with a word per (element, step); what this buys is that a
/// tile kernel reads the words packed beside A and B (one xor an add) instead
/// of hashing each of them (m*n*k hashes become (m + n)*k).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepRand {
    rows: Side,
    cols: Side,
    steps: u64,
}

/// One side's keys: of the first and second word, of the index's high half; its Weyl step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Side {
    k0: u32,
    k1: u32,
    kc: u32,
    gamma: u32,
}

impl Side {
    /// The word (top bits first) of index `x`: `mix32(lo * gamma + (k0 ^
    /// mix32(hi ^ kc)))` in the high half, and beyond 32 bits the same with
    /// `k1` in the low half.
    #[inline(always)]
    fn word(&self, x: u64, rbits: u32) -> u64 {
        let hi = mix32(((x >> 32) as u32) ^ self.kc);
        let w = (x as u32).wrapping_mul(self.gamma);
        let w0 = mix32(w.wrapping_add(self.k0 ^ hi)) as u64;
        if rbits <= 32 {
            w0 << 32
        } else {
            w0 << 32 | mix32(w.wrapping_add(self.k1 ^ hi)) as u64
        }
    }

    /// `out[l] = word(x0 + l * stride)`, 8 at a time with AVX2 where the 8
    /// indices share their high half and `rbits <= 32`.
    fn fill(&self, x0: u64, stride: u64, rbits: u32, out: &mut [u64]) {
        #[cfg(target_arch = "x86_64")]
        if rbits <= 32 && crate::convert::detected_isa() >= crate::convert::Isa::Avx2 {
            // SAFETY: avx2 was detected.
            return unsafe { self.fill_avx2(x0, stride, out) };
        }
        for (l, o) in out.iter_mut().enumerate() {
            *o = self.word(x0.wrapping_add((l as u64).wrapping_mul(stride)), rbits);
        }
    }

    /// # Safety
    /// The CPU must support avx2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn fill_avx2(&self, x0: u64, stride: u64, out: &mut [u64]) {
        use std::arch::x86_64::*;
        let lanes = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(stride as u32 as i32));
        let g = _mm256_set1_epi32(self.gamma as i32);
        let mut l = 0;
        while l + 8 <= out.len() {
            let first = x0.wrapping_add((l as u64).wrapping_mul(stride));
            let last = first.wrapping_add(7u64.wrapping_mul(stride));
            if last < first || first >> 32 != last >> 32 || stride >> 32 != 0 {
                break;
            }
            let hi = mix32(((first >> 32) as u32) ^ self.kc);
            // SAFETY: avx2 per the contract; the stores cover out[l..l + 8].
            unsafe {
                let lo = _mm256_add_epi32(_mm256_set1_epi32(first as u32 as i32), lanes);
                let w = mix32_x8(_mm256_add_epi32(_mm256_mullo_epi32(lo, g), _mm256_set1_epi32((self.k0 ^ hi) as i32)));
                let z = _mm256_setzero_si256();
                // Each word into the high half of its u64.
                let a = _mm256_unpacklo_epi32(z, w);
                let b = _mm256_unpackhi_epi32(z, w);
                let p = out.as_mut_ptr().add(l) as *mut __m256i;
                _mm256_storeu_si256(p, _mm256_permute2x128_si256::<0x20>(a, b));
                _mm256_storeu_si256(p.add(1), _mm256_permute2x128_si256::<0x31>(a, b));
            }
            l += 8;
        }
        for (q, o) in out.iter_mut().enumerate().skip(l) {
            *o = self.word(x0.wrapping_add((q as u64).wrapping_mul(stride)), 32);
        }
    }
}

impl StepRand {
    /// The GEMM's words under `key` for `steps` steps an element (its counters
    /// are `i * steps + t`, so `steps` fixes the stream).
    pub fn new(key: SeedKey, steps: u64) -> Self {
        StepRand {
            rows: Side { k0: key.a0, k1: key.a1, kc: key.c, gamma: key.g0 },
            cols: Side { k0: key.b0, k1: key.b1, kc: !key.c, gamma: key.g1 },
            steps,
        }
    }

    /// The words of the transposed product: row `i`'s are column `i`'s and
    /// column `j`'s row `j`'s, so element `(j, i)` of `c^T = b^T a^T` draws the
    /// bits element `(i, j)` of `c = a b` draws.
    pub fn transposed(self) -> Self {
        StepRand { rows: self.cols, cols: self.rows, steps: self.steps }
    }

    /// Row `i`'s word at step `t` (its top `rbits` bits used).
    #[inline(always)]
    pub fn row(&self, i: usize, t: usize, rbits: u32) -> u64 {
        self.rows.word((i as u64).wrapping_mul(self.steps).wrapping_add(t as u64), rbits)
    }

    /// Column `j`'s word at step `t` (its top `rbits` bits used).
    #[inline(always)]
    pub fn col(&self, j: usize, t: usize, rbits: u32) -> u64 {
        self.cols.word((j as u64).wrapping_mul(self.steps).wrapping_add(t as u64), rbits)
    }

    /// `out[q] = row(i, t0 + q, rbits)`.
    pub fn row_run(&self, i: usize, t0: usize, rbits: u32, out: &mut [u64]) {
        self.rows.fill((i as u64).wrapping_mul(self.steps).wrapping_add(t0 as u64), 1, rbits, out)
    }

    /// `out[l] = col(j0 + l, t, rbits)`.
    pub fn col_run(&self, j0: usize, t: usize, rbits: u32, out: &mut [u64]) {
        self.cols.fill((j0 as u64).wrapping_mul(self.steps).wrapping_add(t as u64), self.steps, rbits, out)
    }

    /// The Weyl value under column `j`'s first word at step `t`: that word
    /// (the top 32 bits of [`StepRand::col`]) is `mix32` of it, and step
    /// `t + 1`'s is `mix32` of it plus [`StepRand::col_gamma`] while the
    /// index's high half stays the same (also returned: `(j * steps + t) >> 32`).
    pub fn col_weyl(&self, j: usize, t: usize) -> (u32, u32) {
        let x = (j as u64).wrapping_mul(self.steps).wrapping_add(t as u64);
        let hi = mix32(((x >> 32) as u32) ^ self.cols.kc);
        ((x as u32).wrapping_mul(self.cols.gamma).wrapping_add(self.cols.k0 ^ hi), (x >> 32) as u32)
    }

    /// The Weyl step of the column words ([`StepRand::col_weyl`]).
    pub fn col_gamma(&self) -> u32 {
        self.cols.gamma
    }

    /// The top `rbits` (1..=64) bits of a word, in the low bits.
    #[inline(always)]
    pub fn top(w: u64, rbits: u32) -> u64 {
        w >> (64 - rbits)
    }

    /// `rbits` random bits of step `t` of element `(i, j)`.
    #[inline(always)]
    pub fn bits(&self, i: usize, j: usize, t: usize, rbits: u32) -> u64 {
        Self::top(self.row(i, t, rbits) ^ self.col(j, t, rbits), rbits)
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
    fn eight_lanes_equal_the_scalar_bits() {
        let r = Rng::new(SeedKey::from_seed(9));
        // Strided indices, within one high half and across a change of it.
        for (base, stride) in [(12345u64, 1u64), (77, 300), ((1u64 << 32) - 5, 1), ((3u64 << 32) - 700, 129), (u64::MAX - 3, 1)] {
            let idx: [u64; 8] = std::array::from_fn(|l| base.wrapping_add(l as u64 * stride));
            for rbits in [1, 13, 32, 33, 64] {
                assert_eq!(r.bits8(idx, rbits), idx.map(|i| r.bits(i, rbits)), "base {base} stride {stride} rbits {rbits}");
            }
        }
    }

    #[test]
    fn filled_words_hold_the_bits() {
        let r = Rng::new(SeedKey::from_seed(11));
        for (x0, stride, len) in [(5u64, 1u64, 37usize), (1000, 513, 128), ((1u64 << 32) - 900, 129, 21), (u64::MAX - 40, 7, 9)] {
            let mut out = vec![0u64; len];
            r.fill32(x0, stride, &mut out);
            for (l, &w) in out.iter().enumerate() {
                let i = x0.wrapping_add(l as u64 * stride);
                for rbits in [1, 13, 32] {
                    assert_eq!(w >> (64 - rbits), r.bits(i, rbits), "x0 {x0} stride {stride} lane {l} rbits {rbits}");
                }
            }
        }
    }

    #[test]
    fn no_seed_draws_another_seeds_words_shifted() {
        // With one Weyl step for every seed, seeds whose keys differ by m steps drew one
        // sequence m elements apart: among 2000 seeds, some pair within 4096 elements of
        // each other is expected (2000^2 / 2 * 8192 / 2^32: about 4). A pair of
        // consecutive words of one seed must appear in no other seed's first 4096.
        let n = 4096u64;
        let seeds: Vec<Rng> = (0..2000u64).map(|s| Rng::new(SeedKey::from_seed(s.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 77))).collect();
        let mut at = std::collections::HashMap::with_capacity(seeds.len() * n as usize);
        for (k, r) in seeds.iter().enumerate() {
            let w: Vec<u64> = (0..=n).map(|i| r.bits(i, 32)).collect();
            for i in 0..n as usize {
                at.entry((w[i] << 32) | w[i + 1]).or_insert((k, i));
            }
        }
        for (k, r) in seeds.iter().enumerate() {
            let pair = (r.bits(0, 32) << 32) | r.bits(1, 32);
            assert_eq!(at[&pair], (k, 0), "seed {k}'s first words appear in another stream");
        }
        // And the steps are odd, with enough bit changes, the columns' unlike the rows'.
        for s in 0..10_000u64 {
            let k = SeedKey::from_seed(s);
            for g in [k.g0, k.g1] {
                assert!(g & 1 == 1 && (g ^ (g >> 1)).count_ones() >= 12, "seed {s}: step {g:#x}");
            }
            assert_ne!(k.g0, k.g1);
        }
        assert_eq!(SeedKey::default(), SeedKey::from_seed(0));
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

    #[test]
    fn step_rand_uniform_and_pairwise_independent() {
        // Elements (0, 0), (0, 1), (1, 0) over 2^18 steps: the top 4 bits of the
        // three words form 4096 cells, uniform (chi-square mean 4095, sd 90.5).
        let r = StepRand::new(SeedKey::from_seed(77), 1 << 18);
        let n = 1u64 << 18;
        let mut cells = vec![0u64; 4096];
        for t in 0..n as usize {
            let (x, y, z) = (r.bits(0, 0, t, 4), r.bits(0, 1, t, 4), r.bits(1, 0, t, 4));
            cells[(x << 8 | y << 4 | z) as usize] += 1;
        }
        let c = chi2(&cells, n);
        assert!(c < 4095.0 + 6.0 * 90.5, "chi2 {c}");
        // The fourth corner is the xor of the other three, by construction.
        for t in 0..64 {
            assert_eq!(r.bits(1, 1, t, 64), r.bits(0, 0, t, 64) ^ r.bits(0, 1, t, 64) ^ r.bits(1, 0, t, 64));
        }
        // Other seeds, other words; top bits are the top of the 64-bit word.
        let q = StepRand::new(SeedKey::from_seed(78), 1 << 18);
        assert_ne!(r.bits(3, 4, 5, 64), q.bits(3, 4, 5, 64));
        assert_eq!(r.bits(3, 4, 5, 13), r.bits(3, 4, 5, 32) >> 19);
        assert_eq!(r.bits(3, 4, 5, 32), r.bits(3, 4, 5, 64) >> 32);
        // The runs (vector and scalar, across a change of the index's high half) are the words.
        let big = StepRand::new(SeedKey::from_seed(5), (1 << 31) + 3);
        for rbits in [13, 32, 64] {
            for (i, t0) in [(0usize, 0usize), (1, (1 << 31) - 5), (3, 17)] {
                let mut run = vec![0u64; 40];
                big.row_run(i, t0, rbits, &mut run);
                assert!(run.iter().enumerate().all(|(q, &w)| w == big.row(i, t0 + q, rbits)), "rows {rbits} {i} {t0}");
                big.col_run(i, t0, rbits, &mut run);
                assert!(run.iter().enumerate().all(|(l, &w)| w == big.col(i + l, t0, rbits)), "cols {rbits} {i} {t0}");
            }
        }
        // A column's Weyl values step by its gamma while the index's high half stays,
        // and hold its words (here across a change of the high half: column 1's steps
        // 2^31 - 8 .. 2^31 + 8 pass 2^32).
        for (q, tr) in [(big, false), (big.transposed(), true)] {
            let (w0, h0) = q.col_weyl(1, (1 << 31) - 8);
            for t in 0..16u32 {
                let (w, h) = q.col_weyl(1, (1 << 31) - 8 + t as usize);
                assert_eq!((mix32(w) as u64) << 32, q.col(1, (1 << 31) - 8 + t as usize, 32), "tr {tr} t {t}");
                assert_eq!(h == h0, w == w0.wrapping_add(t.wrapping_mul(q.col_gamma())), "tr {tr} t {t}");
            }
            assert_ne!(h0, q.col_weyl(1, (1 << 31) + 8).1);
        }
    }
}
