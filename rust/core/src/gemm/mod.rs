//! Matrix multiplication: a Goto/BLIS-style GEMM whose packing step decodes
//! every low-precision input format to f32 (or f64), an exact int8 path, an
//! emulated low-precision accumulation path, and the cache-aware leading
//! dimension rule.
//!
//! Layout of the module:
//! - [`Operand`]: a strided view of a matrix in any storage (f32, f64, int8, or
//!   the codes of a [`Format`]) with the decoder that turns elements into f32/f64.
//! - `driver`: the five-loop nest, generic over a `kernels::Kernel` carrying
//!   MR, NR and the block sizes; packing buffers use cache-friendly strides.
//! - `kernels`: the AVX2+FMA 6x16 f32 micro-kernel (std::arch intrinsics), the
//!   AVX-512F 12x32 one chosen where the CPU has it, the f64 and int8 kernels
//!   (int8 also with AVX-512BW/VNNI), and portable fallbacks used when `isa()`
//!   is below AVX2.
//! - `emulate`: `acc = round(acc + a*b)` into any format, optionally chunked.

#![allow(clippy::too_many_arguments)]

mod driver;
pub mod emulate;
mod f64v;
mod int8v;
mod kernels;
mod narrow;

use std::sync::{Arc, Mutex, OnceLock};

use crate::convert::{isa, Isa};
use crate::format::{named, Format};
use crate::{Error, Result};

pub use emulate::{matmul_emulated, products_exact, sum_emulated, AccumSpec, EmuOut};

/// How the elements of an operand are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    F32,
    F64,
    I8,
    /// 8/16/32-bit codes of a [`Format`].
    U8,
    U16,
    U32,
}

impl Storage {
    pub fn bytes(self) -> usize {
        match self {
            Storage::I8 | Storage::U8 => 1,
            Storage::U16 => 2,
            Storage::F32 | Storage::U32 => 4,
            Storage::F64 => 8,
        }
    }
}

/// How one element becomes a real number.
#[derive(Clone, Debug)]
pub(crate) enum Dec {
    F32,
    F64,
    I8,
    /// bfloat16 codes: the upper half of an f32.
    Bf16,
    /// IEEE half codes, converted arithmetically (vectorizes; no 256 KiB table).
    F16,
    /// posit<16, es> codes with es <= 3, decoded arithmetically (as F16).
    Posit16(u32),
    /// 8- or 16-bit codes through a table of every code's f32 value.
    Lut8(Arc<Vec<f32>>),
    Lut16(Arc<Vec<f32>>),
    /// Any codes through `Format::decode` (f64 exact; f32 exact when the format fits).
    Fmt(Format, Storage),
}

/// A strided matrix view. Strides are in elements and may be zero or negative.
#[derive(Clone, Debug)]
pub struct Operand {
    ptr: *const u8,
    pub rows: usize,
    pub cols: usize,
    rs: isize,
    cs: isize,
    dec: Dec,
    fmt: Option<Format>,
    storage: Storage,
}

// SAFETY: an Operand only reads the memory it points to; the creator of the
// view guarantees that memory stays valid and unmodified while it is in use.
unsafe impl Send for Operand {}
unsafe impl Sync for Operand {}

type Table = Arc<Vec<f32>>;

/// Every code's f32 value, shared across calls (fits_f32 formats of <= 16 bits;
/// the recent ones kept, within [`crate::tables::LIMIT`] bytes).
fn table(fmt: &Format) -> Table {
    static CACHE: OnceLock<crate::tables::TableCache<Format>> = OnceLock::new();
    let n = 1usize << (fmt.storage_bytes() * 8);
    CACHE.get_or_init(Default::default).get(*fmt, || (0..n as u64).map(|c| fmt.decode(c) as f32).collect())
}

impl Operand {
    /// A view of `rows x cols` elements at `ptr` with element strides `rs`, `cs`.
    /// `fmt` names the format of code storages (U8/U16/U32) and is ignored otherwise.
    ///
    /// # Safety
    /// Every element `ptr + (i*rs + j*cs) * storage.bytes()` for `i < rows`,
    /// `j < cols` must be readable, properly aligned for its storage type, and
    /// stay valid and unmodified for as long as the operand is used.
    pub unsafe fn from_raw(
        ptr: *const u8,
        storage: Storage,
        fmt: Option<Format>,
        rows: usize,
        cols: usize,
        rs: isize,
        cs: isize,
        arg: &str,
    ) -> Result<Operand> {
        let dec = match storage {
            Storage::F32 => Dec::F32,
            Storage::F64 => Dec::F64,
            Storage::I8 => Dec::I8,
            Storage::U8 | Storage::U16 | Storage::U32 => {
                let f = fmt.ok_or_else(|| Error::type_(format!("{arg}: integer codes need a format")))?;
                if f.storage_bytes() != storage.bytes() {
                    return Err(Error::type_(format!(
                        "{arg}: codes of {} bytes do not match a format of {} bits",
                        storage.bytes(),
                        f.bits()
                    )));
                }
                if f == Format::Float(named::BFLOAT16) {
                    Dec::Bf16
                } else if f == Format::Float(named::FLOAT16) {
                    Dec::F16
                } else if let Format::Posit(p @ crate::format::PositFormat { nbits: 16, es: 0..=3 }) = f {
                    Dec::Posit16(p.es)
                } else if f.fits_f32() && storage == Storage::U8 {
                    Dec::Lut8(table(&f))
                } else if f.fits_f32() && storage == Storage::U16 {
                    Dec::Lut16(table(&f))
                } else {
                    Dec::Fmt(f, storage)
                }
            }
        };
        let fmt = match storage {
            Storage::F32 => Some(Format::Float(named::FLOAT32)),
            Storage::F64 => Some(Format::Float(named::FLOAT64)),
            Storage::I8 => Some(Format::Int(named::INT8)),
            _ => fmt,
        };
        // The column stride of a single column never moves: the contiguous one, so
        // that a 1-D operand's column view (numpy gives its new axis stride 0) is
        // recognised as rows of one element by the paths that read B in place.
        let cs = if cols == 1 { 1 } else { cs };
        Ok(Operand { ptr, rows, cols, rs, cs, dec, fmt, storage })
    }

    /// The transposed view (no copy).
    pub fn t(&self) -> Operand {
        Operand { rows: self.cols, cols: self.rows, rs: self.cs, cs: self.rs, ..self.clone() }
    }

    /// The same view moved `elems` elements further (the next matrix of a batch).
    ///
    /// # Safety
    /// The moved view must satisfy [`Operand::from_raw`]'s conditions.
    pub unsafe fn shifted(&self, elems: isize) -> Operand {
        Operand { ptr: self.ptr.wrapping_offset(elems * self.storage.bytes() as isize), ..self.clone() }
    }

    /// The view of rows `i0..i0 + rows` and columns `j0..j0 + cols` (no copy).
    pub fn block(&self, i0: usize, j0: usize, rows: usize, cols: usize) -> Operand {
        assert!(i0 + rows <= self.rows && j0 + cols <= self.cols, "a block inside the view");
        let off = (i0 as isize * self.rs + j0 as isize * self.cs) * self.storage.bytes() as isize;
        Operand { ptr: self.ptr.wrapping_offset(off), rows, cols, ..self.clone() }
    }

    /// Are all values exactly f32 (so the f32 path loses nothing in the inputs)?
    pub fn fits_f32(&self) -> bool {
        match &self.dec {
            Dec::F64 => false,
            Dec::Fmt(f, _) => f.fits_f32(),
            _ => true,
        }
    }

    pub fn format(&self) -> Option<Format> {
        self.fmt
    }

    pub fn storage(&self) -> Storage {
        self.storage
    }

    /// Element (i, j) as f64 (exact).
    ///
    /// # Safety
    /// `i < rows`, `j < cols`.
    #[inline]
    pub(crate) unsafe fn get_f64(&self, i: usize, j: usize) -> f64 {
        let off = i as isize * self.rs + j as isize * self.cs;
        // SAFETY: in bounds by the caller's contract and from_raw's.
        unsafe { dec_f64(&self.dec, self.ptr, off) }
    }
}

/// Decode the element at element offset `off` to f64.
///
/// # Safety
/// The element must be readable (see [`Operand::from_raw`]).
#[inline(always)]
pub(crate) unsafe fn dec_f64(d: &Dec, p: *const u8, off: isize) -> f64 {
    // SAFETY: the caller guarantees the element is readable.
    unsafe {
        match d {
            Dec::F32 => *(p as *const f32).offset(off) as f64,
            Dec::F64 => *(p as *const f64).offset(off),
            Dec::I8 => *(p as *const i8).offset(off) as f64,
            // bf16 is the upper half of an f32.
            Dec::Bf16 => f32::from_bits((*(p as *const u16).offset(off) as u32) << 16) as f64,
            Dec::F16 => f16_to_f32(*(p as *const u16).offset(off)) as f64,
            Dec::Posit16(es) => posit16_to_f32(*(p as *const u16).offset(off), *es) as f64,
            Dec::Lut8(t) => *t.get_unchecked(*p.offset(off) as usize) as f64,
            Dec::Lut16(t) => *t.get_unchecked(*(p as *const u16).offset(off) as usize) as f64,
            Dec::Fmt(f, s) => f.decode(match s {
                Storage::U8 => *p.offset(off) as u64,
                Storage::U16 => *(p as *const u16).offset(off) as u64,
                _ => *(p as *const u32).offset(off) as u64,
            }),
        }
    }
}

/// IEEE half to f32, exactly.
#[inline(always)]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7fff;
    // Exponent and mantissa moved to f32 position read as an f32 (a denormal for
    // fp16 subnormals) times 2^112 (bits 0x7780_0000) rebias exactly.
    let v = (f32::from_bits(em << 13) * f32::from_bits(0x7780_0000)).to_bits();
    // inf / NaN: all-ones f32 exponent, mantissa (payload) kept.
    let bits = if em >= 0x7c00 { (em << 13) | 0x7f80_0000 } else { v };
    f32::from_bits(bits | sign)
}

/// posit<16, es> (es <= 3) to f32, exactly, without branches or tables (so
/// that decode loops vectorize). The code's magnitude (two's complement of
/// negative codes) after the sign bit is a regime run of m equal bits, its
/// terminating bit, es exponent bits and the fraction (bits cut off are 0);
/// the value is 2^(k * 2^es + e) * 1.fraction with k = m - 1 for a run of
/// ones and -m for a run of zeros.
#[inline(always)]
pub(crate) fn posit16_to_f32(c: u16, es: u32) -> f32 {
    let c = c as u32;
    let neg = c >> 15;
    let x = (c ^ 0u32.wrapping_sub(neg)).wrapping_add(neg) & 0xffff;
    let body = x & 0x7fff;
    let first = body >> 14;
    // A run of ones is a run of zeros of the complement; its length is 15 minus
    // the bit length of what follows, read off an exact f32 conversion (< 2^15).
    let z = (body ^ 0u32.wrapping_sub(first)) & 0x7fff;
    let bl = ((z as f32).to_bits() >> 23).saturating_sub(126);
    let m = 15 - bl;
    let k = if first == 1 { m as i32 - 1 } else { -(m as i32) };
    let rest = (body << (m + 1)) & 0x7fff;
    let e = rest >> (15 - es);
    let frac = rest & ((1 << (15 - es)) - 1);
    let scale = (k << es) + e as i32;
    let v = f32::from_bits((((scale + 127) as u32) << 23) | (frac << (8 + es)) | (neg << 31));
    // Zero and NaR (the codes whose body is all zeros).
    let v = if body == 0 { 0.0 } else { v };
    if c == 0x8000 {
        f32::NAN
    } else {
        v
    }
}

/// A strided output matrix.
#[derive(Clone, Copy, Debug)]
pub struct OutMat<T> {
    pub ptr: *mut T,
    pub rows: usize,
    pub cols: usize,
    pub rs: isize,
    pub cs: isize,
}

// SAFETY: the GEMM writes disjoint tiles of the output from different threads.
unsafe impl<T> Send for OutMat<T> {}
unsafe impl<T> Sync for OutMat<T> {}

impl<T> OutMat<T> {
    /// # Safety
    /// Every element `ptr + i*rs + j*cs` (`i < rows`, `j < cols`) must be
    /// writable, distinct elements must not overlap, and no other reference may
    /// access them while the GEMM runs.
    pub unsafe fn from_raw(ptr: *mut T, rows: usize, cols: usize, rs: isize, cs: isize) -> Self {
        OutMat { ptr, rows, cols, rs, cs }
    }

    /// The transposed view of the same elements.
    pub fn t(self) -> Self {
        OutMat { ptr: self.ptr, rows: self.cols, cols: self.rows, rs: self.cs, cs: self.rs }
    }

    /// Pointer to element (i, j) (no bounds check; dereferencing needs i < rows, j < cols).
    #[inline(always)]
    pub fn at(&self, i: usize, j: usize) -> *mut T {
        self.ptr.wrapping_offset(i as isize * self.rs + j as isize * self.cs)
    }
}

fn check_shapes(a: &Operand, b: &Operand, rows: usize, cols: usize) -> Result<()> {
    if a.cols != b.rows {
        return Err(Error::value(format!(
            "b: shape mismatch: a is {}x{} but b is {}x{} (a.shape[-1] must equal b.shape[-2])",
            a.rows, a.cols, b.rows, b.cols
        )));
    }
    if rows != a.rows || cols != b.cols {
        return Err(Error::value(format!("out: shape {}x{} must be {}x{}", rows, cols, a.rows, b.cols)));
    }
    Ok(())
}

fn simd() -> bool {
    isa() >= Isa::Avx2
}

/// May the GEMM use its AVX-512 kernels ([`kernels::F32Avx512`], [`kernels::I8Avx512`])?
fn avx512() -> bool {
    crate::convert::isa_level() >= Isa::Avx512
}

/// Does the CPU have AVX-512BW (the int8 kernel's 16-bit multiply-adds)? (std caches
/// the detection.)
fn avx512bw() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::is_x86_feature_detected!("avx512bw");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Does the CPU have AVX-512 VNNI (`vpdpwssd`) besides AVX-512BW?
fn vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::is_x86_feature_detected!("avx512vnni") && avx512bw();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `c = a @ b` with f32 accumulation (inputs decoded to f32 while packing).
pub fn matmul_f32(a: &Operand, b: &Operand, c: OutMat<f32>) -> Result<()> {
    check_shapes(a, b, c.rows, c.cols)?;
    if !a.fits_f32() || !b.fits_f32() {
        return Err(Error::type_("a, b: the float32 path needs inputs whose values are all float32 (use float64 accumulation)"));
    }
    if simd() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: simd() means avx2, fma and f16c were detected.
        if unsafe { driver::small_f32(a, b, c) || driver::gemv_f32(a, b, c) } {
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        if avx512() {
            driver::gemm(&kernels::F32Avx512, a, b, c);
            return Ok(());
        }
        driver::gemm(&kernels::F32Avx2, a, b, c);
    } else {
        driver::gemm(&kernels::F32Portable, a, b, c);
    }
    Ok(())
}

/// `c = a @ b` with f64 accumulation (any inputs, decoded exactly to f64).
pub fn matmul_f64(a: &Operand, b: &Operand, c: OutMat<f64>) -> Result<()> {
    check_shapes(a, b, c.rows, c.cols)?;
    if simd() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: simd() means avx2, fma and f16c were detected.
        if unsafe { f64v::gemv_f64(a, b, c) } {
            return Ok(());
        }
        driver::gemm(&kernels::F64Avx2, a, b, c);
    } else {
        driver::gemm(&kernels::F64Portable, a, b, c);
    }
    Ok(())
}

/// `c = a @ b` for int8 inputs with exact int32 accumulation (wrapping past
/// 2^31, as numpy's int32 arithmetic does; exact for k <= 2^17).
pub fn matmul_i8(a: &Operand, b: &Operand, c: OutMat<i32>) -> Result<()> {
    check_shapes(a, b, c.rows, c.cols)?;
    if a.storage != Storage::I8 || b.storage != Storage::I8 {
        return Err(Error::type_("a, b: the int8 path needs two int8 operands"));
    }
    if simd() {
        // SAFETY: avx2 was detected (simd); the operands and c as for the loop nest.
        #[cfg(target_arch = "x86_64")]
        if unsafe { int8v::gemv_i8(a, b, c) } {
            return Ok(());
        }
        if avx512() && avx512bw() {
            driver::gemm(&kernels::I8Avx512, a, b, c);
            return Ok(());
        }
        driver::gemm(&kernels::I8Avx2, a, b, c);
    } else {
        driver::gemm(&kernels::I8Portable, a, b, c);
    }
    Ok(())
}

/// Runs `run(i)` for the products `0..count` of a batch, each of `madds`
/// multiply-adds: products too small to be split over the threads (as one
/// product alone would not be) one per thread at a time, each on its thread
/// alone ([`crate::parallel::serially`]); larger ones in turn, each over every
/// thread. Product 0 runs first, so that an error of the batch's shapes or
/// formats (which its products share) is its error; after an error no
/// further product starts, and the first error met is returned. Every
/// product computes what it computes alone.
pub fn for_batch(count: usize, madds: usize, run: &(dyn Fn(usize) -> Result<()> + Sync)) -> Result<()> {
    if count == 0 {
        return Ok(());
    }
    run(0)?;
    if madds >= driver::PAR_MIN {
        return (1..count).try_for_each(run);
    }
    let first_err: Mutex<Option<Error>> = Mutex::new(None);
    let failed = std::sync::atomic::AtomicBool::new(false);
    crate::parallel::for_each_item(count - 1, &|i| {
        if failed.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        if let Err(e) = crate::parallel::serially(|| run(i + 1)) {
            failed.store(true, std::sync::atomic::Ordering::Relaxed);
            first_err.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
        }
    });
    match first_err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Cache line in bytes.
pub const CACHE_LINE: usize = 64;
/// Row strides that are multiples of this many bytes send rows to few L1 sets
/// (32 KiB, 8-way L1: one way spans 4096 bytes; a stride of 4096 B maps every
/// row to the same set, and any multiple of 1024 B maps rows to at most 4 sets).
pub const ALIAS_BYTES: usize = 1024;

/// A leading dimension (in elements) for rows of `n` elements of `itemsize`
/// bytes: `n` rounded up to a whole number of cache lines, plus one more line
/// whenever the row length in bytes would be a multiple of [`ALIAS_BYTES`].
/// E.g. f32: 1024 -> 1040, 1000 -> 1008, 1008 -> 1008; bf16: 2048 -> 2080.
pub fn padded_ld(n: usize, itemsize: usize) -> Result<usize> {
    if itemsize == 0 || !CACHE_LINE.is_multiple_of(itemsize) {
        return Err(Error::value(format!("dtype: itemsize {itemsize} must divide the {CACHE_LINE}-byte cache line")));
    }
    let line = CACHE_LINE / itemsize;
    let mut ld = n.div_ceil(line).max(1) * line;
    if (ld * itemsize).is_multiple_of(ALIAS_BYTES) {
        ld += line;
    }
    Ok(ld)
}

#[cfg(test)]
mod tests;

/// A plain unpacked f32 kernel for the leading-dimension experiment: each
/// output row walks a block of 8 columns of B straight down (stride `ldb`), so
/// its speed shows how rows of B map to L1 sets. Not used by `matmul`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_unpacked_f32(a: &[f32], lda: usize, b: &[f32], ldb: usize, c: &mut [f32], ldc: usize, m: usize, n: usize, k: usize) -> Result<()> {
    let need = |rows: usize, cols: usize, ld: usize| if rows == 0 || cols == 0 { 0 } else { (rows - 1) * ld + cols };
    if a.len() < need(m, k, lda) || b.len() < need(k, n, ldb) || c.len() < need(m, n, ldc) || lda < k || ldb < n || ldc < n {
        return Err(Error::value("a, b, out: buffers too small for the given shapes and leading dimensions"));
    }
    for i in 0..m {
        let ar = &a[i * lda..i * lda + k];
        let mut j = 0;
        while j < n {
            let w = 8.min(n - j);
            let mut acc = [0f32; 8];
            for (p, &av) in ar.iter().enumerate() {
                let br = &b[p * ldb + j..p * ldb + j + w];
                for (x, &bv) in acc.iter_mut().zip(br) {
                    *x += av * bv;
                }
            }
            c[i * ldc + j..i * ldc + j + w].copy_from_slice(&acc[..w]);
            j += w;
        }
    }
    Ok(())
}
