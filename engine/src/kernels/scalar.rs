//! Plain reference kernels: the definition every optimized tier is tested against.
//!
//! Names follow ggml (`vec_dot_q4_1_q8_1`: Q4_1 weights against Q8_1 activations).

use half::{bf16, f16};

use super::tiles::{OutLayout, each_row};
use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1, QK};

/// Lanes of independent accumulators, so that the compiler can vectorize float sums.
const LANES: usize = 8;

/// `sum(a[i] * b[i])` over values widened to f32 by `widen`: eight lanes of separate multiply and add,
/// the lanes summed in order, the tail last. The f32, f16 and bf16 dots (and the SIMD attention dot,
/// which reproduces these bits) share this order.
fn dot_widened<T: Copy>(a: &[T], b: &[T], widen: impl Fn(T) -> f32) -> f32 {
    dot_lanes(a, b, &widen, &widen)
}

/// [`dot_widened`] over two types, each widened by its own function.
fn dot_lanes<A: Copy, B: Copy>(
    a: &[A],
    b: &[B],
    widen_a: impl Fn(A) -> f32,
    widen_b: impl Fn(B) -> f32,
) -> f32 {
    let mut acc = [0f32; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in ca.by_ref().zip(cb.by_ref()) {
        for l in 0..LANES {
            acc[l] += widen_a(x[l]) * widen_b(y[l]);
        }
    }
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(&x, &y)| widen_a(x) * widen_b(y))
        .sum();
    acc.iter().sum::<f32>() + tail
}

/// `sum(a[i] * b[i])` in f32.
pub fn vec_dot_f32(a: &[f32], b: &[f32]) -> f32 {
    dot_widened(a, b, |v| v)
}

/// f16 weights against f16 activations, accumulated in f32 (ggml `ggml_vec_dot_f16`).
pub fn vec_dot_f16(a: &[f16], b: &[f16]) -> f32 {
    dot_widened(a, b, f16::to_f32)
}

/// bf16 weights against bf16 activations, accumulated in f32 (ggml `ggml_vec_dot_bf16`).
pub fn vec_dot_bf16(a: &[bf16], b: &[bf16]) -> f32 {
    dot_widened(a, b, bf16::to_f32)
}

fn dot_i8(a: &[i8; QK], b: &[i8; QK]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| x as i32 * y as i32).sum()
}

/// ggml `ggml_vec_dot_q8_0_q8_0`.
pub fn vec_dot_q8_0_q8_0(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    x.iter()
        .zip(y)
        .map(|(a, b)| dot_i8(&a.qs, &b.qs) as f32 * (a.d.to_f32() * b.d.to_f32()))
        .sum()
}

/// Unpacks the 32 nibbles of a 4-bit block in element order.
fn nibbles(qs: &[u8; QK / 2]) -> [i8; QK] {
    let mut out = [0i8; QK];
    for j in 0..QK / 2 {
        out[j] = (qs[j] & 0x0f) as i8;
        out[j + QK / 2] = (qs[j] >> 4) as i8;
    }
    out
}

/// ggml `ggml_vec_dot_q4_0_q8_0`.
pub fn vec_dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    x.iter()
        .zip(y)
        .map(|(a, b)| {
            let q = nibbles(&a.qs).map(|v| v - 8);
            dot_i8(&q, &b.qs) as f32 * (a.d.to_f32() * b.d.to_f32())
        })
        .sum()
}

/// ggml `ggml_vec_dot_q4_1_q8_1`: `sum(d_x d_y q_x q_y) + m_x s_y` per block.
pub fn vec_dot_q4_1_q8_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    x.iter()
        .zip(y)
        .map(|(a, b)| {
            let q = nibbles(&a.qs);
            dot_i8(&q, &b.qs) as f32 * (a.d.to_f32() * b.d.to_f32()) + a.m.to_f32() * b.s.to_f32()
        })
        .sum()
}

/// Four f16 weight rows against one activation row: four calls of [`vec_dot_f16`].
pub fn vec_dot_f16_x4(rows: [&[f16]; 4], y: &[f16]) -> [f32; 4] {
    rows.map(|x| vec_dot_f16(x, y))
}

/// Four Q8_0 weight rows against one activation row: four calls of [`vec_dot_q8_0_q8_0`].
pub fn vec_dot_q8_0_q8_0_x4(rows: [&[BlockQ8_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
    rows.map(|x| vec_dot_q8_0_q8_0(x, y))
}

/// The rows of `w` (rows of `y.len()` blocks, one per entry of `out`) against one activation row:
/// one call of [`vec_dot_q8_0_q8_0`] per row.
pub fn gemv_q8_0_q8_0(w: &[BlockQ8_0], y: &[BlockQ8_0], out: &mut [f32]) {
    each_row(w, y.len(), out, |row| vec_dot_q8_0_q8_0(row, y));
}

/// Four Q4_0 weight rows against one activation row: four calls of [`vec_dot_q4_0_q8_0`].
pub fn vec_dot_q4_0_q8_0_x4(rows: [&[BlockQ4_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
    rows.map(|x| vec_dot_q4_0_q8_0(x, y))
}

/// Four Q4_1 weight rows against one activation row: four calls of [`vec_dot_q4_1_q8_1`].
pub fn vec_dot_q4_1_q8_1_x4(rows: [&[BlockQ4_1]; 4], y: &[BlockQ8_1]) -> [f32; 4] {
    rows.map(|x| vec_dot_q4_1_q8_1(x, y))
}

/// `dot` of every row of `w` against every token of `x` (`nb` blocks each), into `out` as `layout`
/// places them.
fn gemm<W, A>(
    w: &[W],
    x: &[A],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
    dot: fn(&[W], &[A]) -> f32,
) {
    if nb == 0 {
        return;
    }
    for (r, row) in w.chunks_exact(nb).enumerate() {
        for (t, token) in x.chunks_exact(nb).enumerate() {
            out[t * layout.token_stride + r * layout.row_stride] = dot(row, token);
        }
    }
}

/// [`vec_dot_q8_0_q8_0`] of every row of `w` against every token of `x` (`nb` blocks each), into
/// `out` as `layout` places them, one call per result.
pub fn gemm_q8_0_q8_0(
    w: &[BlockQ8_0],
    x: &[BlockQ8_0],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm(w, x, nb, out, layout, vec_dot_q8_0_q8_0);
}

/// [`vec_dot_q4_0_q8_0`] of every row of `w` against every token of `x`, as [`gemm_q8_0_q8_0`].
pub fn gemm_q4_0_q8_0(
    w: &[BlockQ4_0],
    x: &[BlockQ8_0],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm(w, x, nb, out, layout, vec_dot_q4_0_q8_0);
}

/// [`vec_dot_q4_1_q8_1`] of every row of `w` against every token of `x`, as [`gemm_q8_0_q8_0`].
pub fn gemm_q4_1_q8_1(
    w: &[BlockQ4_1],
    x: &[BlockQ8_1],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm(w, x, nb, out, layout, vec_dot_q4_1_q8_1);
}
