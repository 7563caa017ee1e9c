//! The one dispatch point for matrix products: activations are converted once per matmul to the type
//! the weights pair with (ggml's `vec_dot_type`), then every output row is a dot product.
//!
//! Work is split over output rows on the caller's rayon pool; kernels never spawn threads.

mod avx2;
mod avx512;
pub mod cpu;
pub mod dispatch;
pub mod scalar;

use half::{bf16, f16};
use rayon::prelude::*;

use crate::{
    quant::{self, BlockQ8_0, BlockQ8_1, QK},
    weights::{Weight, WeightData},
};

/// Rows per parallel task: small enough to balance, large enough to amortize scheduling.
const ROWS_PER_TASK: usize = 64;

/// Reusable buffers for converted activations.
#[derive(Default)]
pub struct MatmulScratch {
    f16: Vec<f16>,
    bf16: Vec<bf16>,
    q8_0: Vec<BlockQ8_0>,
    q8_1: Vec<BlockQ8_1>,
    transposed: Vec<f32>,
}

/// Activations converted for one weight type.
enum Converted<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
    Q8_0(&'a [BlockQ8_0]),
    Q8_1(&'a [BlockQ8_1]),
}

fn convert<'a>(w: &Weight, x: &'a [f32], scratch: &'a mut MatmulScratch) -> Converted<'a> {
    match &w.data {
        WeightData::F32(_) => Converted::F32(x),
        WeightData::F16(_) => {
            scratch.f16.clear();
            scratch.f16.extend(x.iter().map(|&v| f16::from_f32(v)));
            Converted::F16(&scratch.f16)
        }
        WeightData::Bf16(_) => {
            scratch.bf16.clear();
            scratch.bf16.extend(x.iter().map(|&v| bf16::from_f32(v)));
            Converted::Bf16(&scratch.bf16)
        }
        WeightData::Q8_0(_) | WeightData::Q4_0(_) => {
            scratch.q8_0.resize(x.len() / QK, BlockQ8_0::default());
            quant::quantize_activations_q8_0(x, &mut scratch.q8_0);
            Converted::Q8_0(&scratch.q8_0)
        }
        WeightData::Q4_1(_) => {
            scratch.q8_1.resize(x.len() / QK, BlockQ8_1::default());
            quant::quantize_activations_q8_1(x, &mut scratch.q8_1);
            Converted::Q8_1(&scratch.q8_1)
        }
    }
}

/// Dot product of weight row `row` with converted activation row `t`.
fn row_dot(w: &Weight, x: &Converted<'_>, row: usize, t: usize) -> f32 {
    let (c, b) = (w.cols, w.cols / QK);
    match (&w.data, x) {
        (WeightData::F32(v), Converted::F32(a)) => {
            scalar::vec_dot_f32(&v[row * c..(row + 1) * c], &a[t * c..(t + 1) * c])
        }
        (WeightData::F16(v), Converted::F16(a)) => {
            scalar::vec_dot_f16(&v[row * c..(row + 1) * c], &a[t * c..(t + 1) * c])
        }
        (WeightData::Bf16(v), Converted::Bf16(a)) => {
            scalar::vec_dot_bf16(&v[row * c..(row + 1) * c], &a[t * c..(t + 1) * c])
        }
        (WeightData::Q8_0(v), Converted::Q8_0(a)) => {
            scalar::vec_dot_q8_0_q8_0(&v[row * b..(row + 1) * b], &a[t * b..(t + 1) * b])
        }
        (WeightData::Q4_0(v), Converted::Q8_0(a)) => {
            scalar::vec_dot_q4_0_q8_0(&v[row * b..(row + 1) * b], &a[t * b..(t + 1) * b])
        }
        (WeightData::Q4_1(v), Converted::Q8_1(a)) => {
            scalar::vec_dot_q4_1_q8_1(&v[row * b..(row + 1) * b], &a[t * b..(t + 1) * b])
        }
        _ => unreachable!("activations are converted for the weight's own type"),
    }
}

/// `out[t][r] = sum_k W[r][k] * x[t][k]` for `n_tokens` rows of `x` (`n_tokens x w.cols`, row-major);
/// `out` is `n_tokens x w.rows`. Runs on the current rayon pool.
pub fn matmul(
    w: &Weight,
    x: &[f32],
    n_tokens: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    debug_assert_eq!(x.len(), n_tokens * w.cols);
    debug_assert_eq!(out.len(), n_tokens * w.rows);
    let mut transposed = std::mem::take(&mut scratch.transposed);
    transposed.resize(n_tokens * w.rows, 0.0);
    {
        let converted = convert(w, x, scratch);
        transposed
            .par_chunks_mut(ROWS_PER_TASK * n_tokens)
            .enumerate()
            .for_each(|(task, chunk)| {
                let first_row = task * ROWS_PER_TASK;
                for (i, row_out) in chunk.chunks_exact_mut(n_tokens).enumerate() {
                    for (t, o) in row_out.iter_mut().enumerate() {
                        *o = row_dot(w, &converted, first_row + i, t);
                    }
                }
            });
    }
    for (r, row) in transposed.chunks_exact(n_tokens).enumerate() {
        for (t, &v) in row.iter().enumerate() {
            out[t * w.rows + r] = v;
        }
    }
    scratch.transposed = transposed;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::WeightType;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    /// Every runtime type's matmul stays close to the f32 product of its own dequantized weights.
    #[test]
    fn matmul_matches_dequantized_f32_product() {
        let (rows, cols, n) = (70, 96, 3);
        let values = random(rows * cols, 1);
        let x = random(n * cols, 2);
        for kind in WeightType::ALL {
            let w = Weight::from_f32(values.clone(), rows, cols, kind);
            let dense = w.to_f32();
            let mut out = vec![0f32; n * rows];
            matmul(&w, &x, n, &mut out, &mut MatmulScratch::default());
            for t in 0..n {
                for r in 0..rows {
                    let want: f32 = (0..cols)
                        .map(|k| dense[r * cols + k] * x[t * cols + k])
                        .sum();
                    let got = out[t * rows + r];
                    // Activation rounding (f16/bf16/int8) bounds the error; f32 is exact up to summation order.
                    let tol = match kind {
                        WeightType::F32 => 1e-4,
                        WeightType::F16 => 2e-2,
                        _ => 0.15,
                    };
                    assert!(
                        (want - got).abs() < tol,
                        "{kind} row {r} token {t}: {want} vs {got}"
                    );
                }
            }
        }
    }
}
