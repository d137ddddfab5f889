//! Kernels against a dense f64 reference, on every path, plus malformed input.

use super::*;
use crate::convert::{set_isa, Isa};

/// Tiny deterministic generator (xorshift) for test data.
struct Gen(u64);
impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn dense_mm(a: &[f32], m: usize, n: usize, b: &[f32], k: usize, transpose: bool) -> Vec<f64> {
    let (ro, ri) = if transpose { (n, m) } else { (m, n) };
    let mut o = vec![0f64; ro * k];
    for i in 0..m {
        for j in 0..n {
            let v = a[i * n + j] as f64;
            if v == 0.0 {
                continue;
            }
            let (oi, ii) = if transpose { (j, i) } else { (i, j) };
            let _ = ri;
            for c in 0..k {
                o[oi * k + c] += v * b[ii * k + c] as f64;
            }
        }
    }
    o
}

fn close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((*g as f64 - w).abs() <= tol * (1.0 + w.abs()), "{g} vs {w}");
    }
}

fn random_dense(g: &mut Gen, m: usize, n: usize, density: f64) -> Vec<f32> {
    (0..m * n).map(|_| if (g.next() % 1000) as f64 / 1000.0 < density { g.f() } else { 0.0 }).collect()
}

fn to_csr(a: &[f32], m: usize, n: usize) -> (Vec<f32>, Vec<i32>, Vec<i32>) {
    let (mut v, mut ix, mut p) = (vec![], vec![], vec![0i32]);
    for i in 0..m {
        for j in 0..n {
            if a[i * n + j] != 0.0 {
                v.push(a[i * n + j]);
                ix.push(j as i32);
            }
        }
        p.push(v.len() as i32);
    }
    (v, ix, p)
}

#[test]
fn csr_coo_match_dense_on_every_path() {
    let _settings = crate::settings_write();
    let mut g = Gen(0x9E3779B97F4A7C15);
    for path in [Isa::Scalar, Isa::Avx2] {
        if set_isa(Some(path)).is_err() {
            continue;
        }
        for &(m, n, k) in &[(0, 0, 3), (1, 1, 1), (7, 5, 1), (33, 17, 9), (40, 70, 64), (13, 29, 100), (50, 50, 0)] {
            let a = random_dense(&mut g, m, n, 0.3);
            let (v, ix, p) = to_csr(&a, m, n);
            for tr in [false, true] {
                let rin = if tr { m } else { n };
                let rout = if tr { n } else { m };
                let b: Vec<f32> = (0..rin * k).map(|_| g.f()).collect();
                let want = dense_mm(&a, m, n, &b, k, tr);
                let mut out = vec![f32::NAN; rout * k];
                let d = Dense { data: &b, rows: rin, cols: k };
                csr_matmul(Values::F32(&v), Index::I32(&p), Index::I32(&ix), (m, n), d, &mut out, tr).unwrap();
                close(&out, &want, 1e-5);
                // COO of the same matrix.
                let rows: Vec<i64> = (0..m).flat_map(|i| std::iter::repeat_n(i as i64, (p[i + 1] - p[i]) as usize)).collect();
                let cols: Vec<i64> = ix.iter().map(|&x| x as i64).collect();
                let mut out2 = vec![f32::NAN; rout * k];
                coo_matmul(Values::F32(&v), Index::I64(&rows), Index::I64(&cols), (m, n), d, &mut out2, tr).unwrap();
                close(&out2, &want, 1e-5);
            }
        }
    }
    set_isa(None).unwrap();
}

#[test]
fn bsr_and_nm_match_dense() {
    let _settings = crate::settings_write();
    let mut g = Gen(12345);
    for path in [Isa::Scalar, Isa::Avx2] {
        if set_isa(Some(path)).is_err() {
            continue;
        }
        for &(br, bc) in &[(4, 4), (8, 8), (2, 3), (1, 1)] {
            let (mb, nb, k) = (5, 6, 70);
            let (m, n) = (mb * br, nb * bc);
            let mut a = vec![0f32; m * n];
            let (mut vals, mut ix, mut p) = (vec![], vec![], vec![0i32]);
            for bi in 0..mb {
                for bj in 0..nb {
                    if g.next().is_multiple_of(3) {
                        ix.push(bj as i32);
                        for r in 0..br {
                            for c in 0..bc {
                                let x = g.f();
                                vals.push(x);
                                a[(bi * br + r) * n + bj * bc + c] = x;
                            }
                        }
                    }
                }
                p.push(ix.len() as i32);
            }
            for (tr, k) in [(false, k), (true, k), (false, 1), (true, 1)] {
                let (rin, rout) = if tr { (m, n) } else { (n, m) };
                let b: Vec<f32> = (0..rin * k).map(|_| g.f()).collect();
                let want = dense_mm(&a, m, n, &b, k, tr);
                let mut out = vec![f32::NAN; rout * k];
                let d = Dense { data: &b, rows: rin, cols: k };
                bsr_matmul(Values::F32(&vals), Index::I32(&p), Index::I32(&ix), (m, n), (br, bc), d, &mut out, tr).unwrap();
                close(&out, &want, 1e-5);
                if !ix.is_empty() && !tr {
                    // A block column past the matrix fails the call on every path.
                    let mut bad = ix.clone();
                    bad[ix.len() / 2] = nb as i32;
                    assert!(bsr_matmul(Values::F32(&vals), Index::I32(&p), Index::I32(&bad), (m, n), (br, bc), d, &mut out, tr).is_err());
                }
            }
        }
        // 2:4 and 3:7 (a partial last group).
        for &(nn, mm, cols) in &[(2usize, 4usize, 16usize), (3, 7, 17), (1, 4, 9)] {
            let rows = 6;
            let groups = cols.div_ceil(mm);
            let bits = nm_index_bits(mm) as usize;
            let slots = rows * groups * nn;
            let mut a = vec![0f32; rows * cols];
            let mut vals = vec![];
            let mut idx = vec![0u8; (slots * bits).div_ceil(8)];
            let mut p = 0;
            for r in 0..rows {
                for gi in 0..groups {
                    let width = (cols - gi * mm).min(mm);
                    for t in 0..nn {
                        let pos = (t * width / nn).min(width - 1);
                        let x = if t < width { g.f() } else { 0.0 };
                        vals.push(x);
                        a[r * cols + gi * mm + pos] += x;
                        idx[p * bits / 8] |= (pos as u8) << (p * bits % 8);
                        p += 1;
                    }
                }
            }
            for k in [1usize, 8, 64, 13] {
                for tr in [false, true] {
                    let (rin, rout) = if tr { (rows, cols) } else { (cols, rows) };
                    let b: Vec<f32> = (0..rin * k).map(|_| g.f()).collect();
                    let want = dense_mm(&a, rows, cols, &b, k, tr);
                    let mut out = vec![f32::NAN; rout * k];
                    let d = Dense { data: &b, rows: rin, cols: k };
                    nm_matmul(Values::F32(&vals), &idx, nn, mm, (rows, cols), d, &mut out, tr).unwrap();
                    close(&out, &want, 1e-5);
                }
            }
        }
    }
    set_isa(None).unwrap();
}

#[test]
fn malformed_input_is_an_error() {
    let _settings = crate::settings_read();
    let v = [1f32, 2.0, 3.0];
    let b = [1f32; 4];
    let d = Dense { data: &b, rows: 4, cols: 1 };
    let mut out = [0f32; 2];
    let call = |p: &[i32], ix: &[i32], out: &mut [f32]| csr_matmul(Values::F32(&v), Index::I32(p), Index::I32(ix), (2, 4), d, out, false);
    assert!(call(&[0, 2, 1], &[0, 1, 2], &mut out).is_err()); // not monotone
    assert!(call(&[0, 2], &[0, 1, 2], &mut out).is_err()); // wrong length
    assert!(call(&[1, 2, 3], &[0, 1, 2], &mut out).is_err()); // first != 0
    assert!(call(&[0, 2, 4], &[0, 1, 2], &mut out).is_err()); // last != nnz
    assert!(call(&[0, 2, 3], &[0, 4, 2], &mut out).is_err()); // index past the shape
    assert!(call(&[0, 2, 3], &[0, -1, 2], &mut out).is_err()); // negative index
    assert!(call(&[0, 2, 3], &[0, 1, 2], &mut out).is_ok());
    let mut out2 = [0f32; 4];
    assert!(csr_matmul(Values::F32(&v), Index::I32(&[0, 2, 3]), Index::I32(&[0, 9, 2]), (2, 4), Dense { data: &[1.0; 2], rows: 2, cols: 1 }, &mut out2, true).is_err());
    assert!(coo_matmul(Values::F32(&v), Index::I32(&[0, 1, 2]), Index::I32(&[0, 1, 2]), (2, 4), d, &mut out, false).is_err());
    assert!(nm_check(3, 2).is_err());
    assert!(Values::Tab8(&[1u8], &[0.0; 10]).check().is_err());
}

/// A random 2:4 matrix (`rows x cols`, partial last group allowed): values, packed
/// positions and the dense equivalent.
fn random_24(g: &mut Gen, rows: usize, cols: usize) -> (Vec<f32>, Vec<u8>, Vec<f32>) {
    let groups = cols.div_ceil(4);
    let slots = rows * groups * 2;
    let (mut vals, mut idx, mut a) = (vec![], vec![0u8; (slots * 2).div_ceil(8)], vec![0f32; rows * cols]);
    let mut p = 0;
    for r in 0..rows {
        for gi in 0..groups {
            let width = (cols - gi * 4).min(4);
            for _ in 0..2 {
                let pos = (g.next() % width as u64) as usize;
                // A few explicit zeros, as stored for groups with fewer nonzeros.
                let x = if g.next().is_multiple_of(8) { 0.0 } else { g.f() };
                vals.push(x);
                a[r * cols + gi * 4 + pos] += x;
                idx[p / 4] |= (pos as u8) << (p % 4 * 2);
                p += 1;
            }
        }
    }
    (vals, idx, a)
}

#[test]
fn nm24_panels_match_dense() {
    let _settings = crate::settings_write();
    let mut g = Gen(0xDEADBEEF12345);
    let old = crate::parallel::num_threads();
    for path in [Isa::Avx2, Isa::Scalar] {
        if set_isa(Some(path)).is_err() {
            continue;
        }
        for th in [1usize, 2] {
            crate::parallel::set_num_threads(th).unwrap();
            // Depths around the panel (64 rows) and the 8-group index word; widths around
            // the 64/32/16/8 column tiles and a scalar remainder.
            for &(rows, cols) in &[(1usize, 4usize), (3, 18), (67, 64), (130, 70), (9, 131), (200, 257)] {
                let (vals, idx, a) = random_24(&mut g, rows, cols);
                let bf: Vec<u16> = vals.iter().map(|x| (x.to_bits() >> 16) as u16).collect();
                for k in [1usize, 8, 13, 24, 40, 64, 72, 136] {
                    let b: Vec<f32> = (0..cols * k).map(|_| g.f()).collect();
                    let d = Dense { data: &b, rows: cols, cols: k };
                    let mut out = vec![f32::NAN; rows * k];
                    nm_matmul(Values::F32(&vals), &idx, 2, 4, (rows, cols), d, &mut out, false).unwrap();
                    close(&out, &dense_mm(&a, rows, cols, &b, k, false), 1e-5);
                    // bf16 values (the f32 values truncated), against a reference built slot by slot.
                    let mut out = vec![f32::NAN; rows * k];
                    nm_matmul(Values::Bf16(&bf), &idx, 2, 4, (rows, cols), d, &mut out, false).unwrap();
                    let mut want = vec![0f64; rows * k];
                    let mut p = 0;
                    for r in 0..rows {
                        for gi in 0..cols.div_ceil(4) {
                            for _ in 0..2 {
                                let pos = ((idx[p / 4] >> (p % 4 * 2)) & 3) as usize;
                                let v = f32::from_bits((bf[p] as u32) << 16) as f64;
                                for c in 0..k {
                                    want[r * k + c] += v * b[(gi * 4 + pos) * k + c] as f64;
                                }
                                p += 1;
                            }
                        }
                    }
                    close(&out, &want, 1e-5);
                }
            }
        }
    }
    crate::parallel::set_num_threads(old).unwrap();
    set_isa(None).unwrap();
}

#[test]
fn nm24_bad_position_in_partial_group() {
    let _settings = crate::settings_write();
    // 1 x 6: two groups, the second covers columns 4..6 only; position 3 points at column 7.
    let vals = [1f32, 2.0, 3.0, 4.0];
    for path in [Isa::Avx2, Isa::Scalar] {
        if set_isa(Some(path)).is_err() {
            continue;
        }
        for k in [1usize, 8, 64, 70] {
            let b = vec![1f32; 6 * k];
            let d = Dense { data: &b, rows: 6, cols: k };
            let mut out = vec![0f32; k];
            // Slots 0, 1: positions 0, 1; slots 2, 3: positions 1, 3 (bad), 1 (ok).
            let bad = [0b0100u8 | (0b0111 << 4)];
            assert!(nm_matmul(Values::F32(&vals), &bad, 2, 4, (1, 6), d, &mut out, false).is_err());
            let good = [0b0100u8 | (0b0101 << 4)];
            nm_matmul(Values::F32(&vals), &good, 2, 4, (1, 6), d, &mut out, false).unwrap();
            assert!(out.iter().all(|&x| x == 10.0));
        }
    }
    set_isa(None).unwrap();
}
