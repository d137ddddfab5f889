//! Sparse matrices: validation of compressed index arrays and the products
//! `A @ B` / `A.T @ B` of a sparse `A` with a dense row-major f32 `B`, for
//! CSR (and CSC, as the transpose of a CSR structure), COO, BSR (any block
//! shape; 4x4 and 8x8 unrolled) and N:M structured matrices.
//!
//! Values are f32, bf16 (decoded by a shift) or 8/16-bit codes of any format
//! decoded through a 256/65536-entry f32 table (the caller folds an int8
//! scale into the table). Accumulation is f32.
//!
//! Every kernel checks its index arrays as it reads them (pointer arrays in
//! full before the work is split, column/row indices at each use), so
//! malformed input gives an error, never an out-of-bounds read.

mod kernels;
#[cfg(test)]
mod tests;

use crate::{Error, Result};

/// The stored values of a sparse matrix.
#[derive(Clone, Copy)]
pub enum Values<'a> {
    F32(&'a [f32]),
    /// bfloat16 codes: the value is the code shifted into the top half of an f32.
    Bf16(&'a [u16]),
    /// 8-bit codes and their 256 decoded values.
    Tab8(&'a [u8], &'a [f32]),
    /// 16-bit codes and their 65536 decoded values.
    Tab16(&'a [u16], &'a [f32]),
}

impl Values<'_> {
    pub fn len(&self) -> usize {
        match self {
            Values::F32(v) => v.len(),
            Values::Bf16(v) => v.len(),
            Values::Tab8(v, _) => v.len(),
            Values::Tab16(v, _) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn check(&self) -> Result<()> {
        match self {
            Values::Tab8(_, t) if t.len() != 256 => Err(Error::value(format!("table: 8-bit codes need 256 entries, got {}", t.len()))),
            Values::Tab16(_, t) if t.len() != 65536 => {
                Err(Error::value(format!("table: 16-bit codes need 65536 entries, got {}", t.len())))
            }
            _ => Ok(()),
        }
    }
}

/// Index arrays: int32 or int64 (both arrays of one matrix share the type).
#[derive(Clone, Copy)]
pub enum Index<'a> {
    I32(&'a [i32]),
    I64(&'a [i64]),
}

impl Index<'_> {
    pub fn len(&self) -> usize {
        match self {
            Index::I32(v) => v.len(),
            Index::I64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the entries.
    fn to_owned(self) -> OwnedIndex {
        match self {
            Index::I32(v) => OwnedIndex::I32(v.to_vec()),
            Index::I64(v) => OwnedIndex::I64(v.to_vec()),
        }
    }
}

/// A copied index array.
enum OwnedIndex {
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl OwnedIndex {
    fn view(&self) -> Index<'_> {
        match self {
            OwnedIndex::I32(v) => Index::I32(v),
            OwnedIndex::I64(v) => Index::I64(v),
        }
    }
}

/// An index type: negative values map to `usize::MAX`, which every bound check rejects.
pub(crate) trait Idx: Copy + Send + Sync + 'static {
    fn u(self) -> usize;
    /// The slice as int32 indices, when it is one.
    fn as_i32(s: &[Self]) -> Option<&[i32]> {
        let _ = s;
        None
    }
}

impl Idx for i32 {
    fn as_i32(s: &[Self]) -> Option<&[i32]> {
        Some(s)
    }
    #[inline(always)]
    fn u(self) -> usize {
        if self < 0 {
            usize::MAX
        } else {
            self as usize
        }
    }
}

impl Idx for i64 {
    #[inline(always)]
    fn u(self) -> usize {
        if self < 0 {
            usize::MAX
        } else {
            self as usize
        }
    }
}

/// A dense row-major f32 operand: `rows x cols`, rows `cols` apart.
#[derive(Clone, Copy)]
pub struct Dense<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
}

/// Check a compressed pointer array: length `nmajor + 1`, first 0, non-decreasing,
/// last equal to `nnz`. `name` is the argument named in errors.
pub fn check_indptr(indptr: Index<'_>, nmajor: usize, nnz: usize, name: &str) -> Result<()> {
    fn go<I: Idx>(p: &[I], nmajor: usize, nnz: usize, name: &str) -> Result<()> {
        if p.len() != nmajor + 1 {
            return Err(Error::value(format!("{name}: length must be {} (one more than the compressed dimension: rows of CSR, columns of CSC), got {}", nmajor + 1, p.len())));
        }
        if p[0].u() != 0 {
            return Err(Error::value(format!("{name}: must start at 0")));
        }
        for w in 1..p.len() {
            let (a, b) = (p[w - 1].u(), p[w].u());
            if b == usize::MAX || b < a {
                return Err(Error::value(format!("{name}: must be non-decreasing (entry {w} is smaller than entry {})", w - 1)));
            }
        }
        let last = p[nmajor].u();
        if last != nnz {
            return Err(Error::value(format!("{name}: last entry must equal the number of stored entries ({nnz}), got {last}")));
        }
        Ok(())
    }
    match indptr {
        Index::I32(p) => go(p, nmajor, nnz, name),
        Index::I64(p) => go(p, nmajor, nnz, name),
    }
}

/// Check that every entry of `idx` lies in `0..bound`.
pub fn check_range(idx: Index<'_>, bound: usize, name: &str) -> Result<()> {
    fn go<I: Idx>(p: &[I], bound: usize, name: &str) -> Result<()> {
        // Negative entries map to usize::MAX, so one comparison covers both ends.
        if let Some(pos) = p.iter().position(|&v| v.u() >= bound) {
            return Err(Error::value(format!("{name}: entry {pos} is out of range [0, {bound})")));
        }
        Ok(())
    }
    match idx {
        Index::I32(p) => go(p, bound, name),
        Index::I64(p) => go(p, bound, name),
    }
}

/// Whether each major slice of a valid compressed structure has strictly
/// increasing minor indices (canonical: sorted, no duplicates).
pub fn is_canonical(indptr: Index<'_>, indices: Index<'_>) -> bool {
    fn go<I: Idx>(p: &[I], ix: &[I]) -> bool {
        p.windows(2).all(|w| {
            let (s, e) = (w[0].u(), w[1].u().min(ix.len()));
            s >= e || ix[s..e].windows(2).all(|q| q[0].u() < q[1].u())
        })
    }
    match (indptr, indices) {
        (Index::I32(p), Index::I32(i)) => go(p, i),
        (Index::I64(p), Index::I64(i)) => go(p, i),
        _ => false,
    }
}

fn check_out(out: &[f32], rows: usize, k: usize) -> Result<()> {
    if out.len() != rows * k {
        return Err(Error::value(format!("out: must hold {rows} x {k} values, got {}", out.len())));
    }
    Ok(())
}

fn check_b(b: &Dense<'_>, rows: usize) -> Result<()> {
    if b.rows != rows {
        return Err(Error::value(format!("x: has {} rows, the matrix needs {rows}", b.rows)));
    }
    if b.data.len() != b.rows * b.cols {
        return Err(Error::value(format!("x: must hold {} x {} values, got {}", b.rows, b.cols, b.data.len())));
    }
    Ok(())
}

/// The product of a CSR matrix of `shape` with dense `b`: `out = A @ b`
/// (`transpose = false`, `b` has `shape.1` rows, `out` `shape.0`) or
/// `out = A.T @ b` (`b` has `shape.0` rows, `out` `shape.1`). A CSC matrix is
/// the CSR structure of its transpose.
pub fn csr_matmul(vals: Values<'_>, indptr: Index<'_>, indices: Index<'_>, shape: (usize, usize), b: Dense<'_>, out: &mut [f32], transpose: bool) -> Result<()> {
    vals.check()?;
    let (m, n) = shape;
    if vals.len() != indices.len() {
        return Err(Error::value(format!("data: length {} differs from the length of indices ({})", vals.len(), indices.len())));
    }
    // The kernels trust the checked pointers (ranges of the values read unchecked):
    // a copy, so that another thread writing the caller's array (numpy's are
    // writable) cannot move them after the check. The indices are checked as the
    // kernels read them (except by the float32 SpMV kernel: see csr_spmv_i32).
    let ptr = indptr.to_owned();
    let indptr = ptr.view();
    check_indptr(indptr, m, indices.len(), "indptr")?;
    let (rin, rout) = if transpose { (m, n) } else { (n, m) };
    check_b(&b, rin)?;
    check_out(out, rout, b.cols)?;
    kernels::csr(vals, indptr, indices, shape, b, out, transpose)
}

/// `out = A @ b` or `A.T @ b` for a COO matrix (duplicates add up).
pub fn coo_matmul(vals: Values<'_>, row: Index<'_>, col: Index<'_>, shape: (usize, usize), b: Dense<'_>, out: &mut [f32], transpose: bool) -> Result<()> {
    vals.check()?;
    if row.len() != vals.len() || col.len() != vals.len() {
        return Err(Error::value(format!(
            "row, col: lengths {} and {} must equal the length of data ({})",
            row.len(),
            col.len(),
            vals.len()
        )));
    }
    let (m, n) = shape;
    let (rin, rout) = if transpose { (m, n) } else { (n, m) };
    check_b(&b, rin)?;
    check_out(out, rout, b.cols)?;
    kernels::coo(vals, row, col, shape, b, out, transpose)
}

/// `out = A @ b` or `A.T @ b` for a BSR matrix of `shape` with blocks `block`
/// (values: `nblocks * br * bc`, row-major within each block).
#[allow(clippy::too_many_arguments)]
pub fn bsr_matmul(vals: Values<'_>, indptr: Index<'_>, indices: Index<'_>, shape: (usize, usize), block: (usize, usize), b: Dense<'_>, out: &mut [f32], transpose: bool) -> Result<()> {
    vals.check()?;
    let (m, n) = shape;
    let (br, bc) = block;
    if br == 0 || bc == 0 || m % br != 0 || n % bc != 0 {
        return Err(Error::value(format!("blocksize: ({br}, {bc}) must be positive and divide the shape ({m}, {n})")));
    }
    if vals.len() != indices.len() * br * bc {
        return Err(Error::value(format!(
            "data: must hold {} blocks of {br} x {bc}, got {} values",
            indices.len(),
            vals.len()
        )));
    }
    // A copy of the checked pointers, as in csr_matmul.
    let ptr = indptr.to_owned();
    let indptr = ptr.view();
    check_indptr(indptr, m / br, indices.len(), "indptr")?;
    let (rin, rout) = if transpose { (m, n) } else { (n, m) };
    check_b(&b, rin)?;
    check_out(out, rout, b.cols)?;
    kernels::bsr(vals, indptr, indices, shape, block, b, out, transpose)
}

/// Bits per packed N:M group index: the smallest of 1, 2, 4, 8 holding `0..m`.
pub fn nm_index_bits(m: usize) -> u32 {
    match m {
        0..=2 => 1,
        3..=4 => 2,
        5..=16 => 4,
        _ => 8,
    }
}

/// Check N:M parameters against a shape.
pub fn nm_check(n: usize, m: usize) -> Result<()> {
    if m == 0 || m > 256 {
        return Err(Error::value(format!("m: must be in 1..=256, got {m}")));
    }
    if n == 0 || n > m {
        return Err(Error::value(format!("n: must be in 1..=m ({m}), got {n}")));
    }
    Ok(())
}

/// `out = A @ b` or `A.T @ b` for an N:M matrix: each row holds `ceil(cols/m)`
/// groups of `n` values; `idx` packs each value's position in its group
/// ([`nm_index_bits`] bits, least significant first).
#[allow(clippy::too_many_arguments)]
pub fn nm_matmul(vals: Values<'_>, idx: &[u8], n: usize, m: usize, shape: (usize, usize), b: Dense<'_>, out: &mut [f32], transpose: bool) -> Result<()> {
    vals.check()?;
    nm_check(n, m)?;
    let (rows, cols) = shape;
    let slots = rows * cols.div_ceil(m) * n;
    if vals.len() != slots {
        return Err(Error::value(format!("data: must hold {slots} values for shape {shape:?} and {n}:{m}, got {}", vals.len())));
    }
    let bits = nm_index_bits(m) as usize;
    if idx.len() != (slots * bits).div_ceil(8) {
        return Err(Error::value(format!("indices: must hold {} bytes, got {}", (slots * bits).div_ceil(8), idx.len())));
    }
    let (rin, rout) = if transpose { (rows, cols) } else { (cols, rows) };
    check_b(&b, rin)?;
    check_out(out, rout, b.cols)?;
    kernels::nm(vals, idx, n, m, shape, b, out, transpose)
}
