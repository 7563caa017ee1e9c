//! Plain reference kernels: the definition every optimized tier is tested against.
//!
//! Names follow ggml (`vec_dot_q4_1_q8_1`: Q4_1 weights against Q8_1 activations).

use half::{bf16, f16};

use super::tiles::{OutLayout, each_row};
use crate::quant::{
    self, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0,
    BlockQ8_1, BlockQ8K, QK, QK_K,
};

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

/// ggml `ggml_vec_dot_q5_0_q8_0_generic`: the integer sum of each block times `d_x d_y`, added up in
/// block order.
pub fn vec_dot_q5_0_q8_0(x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0f32;
    for (a, b) in x.iter().zip(y) {
        let q = quant::five_bit_values(&a.qs, &a.qh).map(|v| v as i8 - 16);
        sumf += (a.d.to_f32() * b.d.to_f32()) * dot_i8(&q, &b.qs) as f32;
    }
    sumf
}

/// ggml `ggml_vec_dot_q5_1_q8_1_generic`: `d_x d_y sum(q_x q_y) + m_x s_y` per block, added up in
/// block order.
pub fn vec_dot_q5_1_q8_1(x: &[BlockQ5_1], y: &[BlockQ8_1]) -> f32 {
    let mut sumf = 0f32;
    for (a, b) in x.iter().zip(y) {
        let q = quant::five_bit_values(&a.qs, &a.qh).map(|v| v as i8);
        sumf +=
            (a.d.to_f32() * b.d.to_f32()) * dot_i8(&q, &b.qs) as f32 + a.m.to_f32() * b.s.to_f32();
    }
    sumf
}

/// The integer part of a K-quant super-block's dot as ggml's generic kernels sum it: element `i`'s
/// `scale(i / sub_block) * q[i] * y[i]` into lane `i % 8` of eight int32 sums.
fn k_lanes(
    q: &[i8; QK_K],
    y: &[i8; QK_K],
    sub_block: usize,
    scale: impl Fn(usize) -> i32,
) -> [i32; 8] {
    let mut lanes = [0i32; 8];
    for (s, (qs, ys)) in q
        .chunks_exact(sub_block)
        .zip(y.chunks_exact(sub_block))
        .enumerate()
    {
        let scale = scale(s);
        for (i, (&a, &b)) in qs.iter().zip(ys).enumerate() {
            lanes[i % 8] += scale * (i32::from(a) * i32::from(b));
        }
    }
    lanes
}

/// One super-block's share of a K-quant dot: its eight integer lanes, the weights' `d`, and for the
/// types with mins, `dmin` and `sum(bsums * mins)`.
struct KBlock {
    lanes: [i32; 8],
    d: f32,
    mins: Option<(f32, i32)>,
}

/// The float part of ggml's generic K-quant dots: per super-block, its eight lanes times `d_x d_y`
/// into eight float sums, and the mins' term `dmin_x d_y sum(bsums * mins)` subtracted from a
/// running total; the eight sums are added to that total, in order, at the end.
fn k_dot<W>(x: &[W], y: &[BlockQ8K], block: impl Fn(&W, &BlockQ8K) -> KBlock) -> f32 {
    let mut sums = [0f32; 8];
    let mut sumf = 0f32;
    for (a, b) in x.iter().zip(y) {
        let KBlock { lanes, d, mins } = block(a, b);
        let d = d * b.d;
        for (sum, &lane) in sums.iter_mut().zip(&lanes) {
            *sum += d * lane as f32;
        }
        if let Some((dmin, mins)) = mins {
            sumf -= dmin * b.d * mins as f32;
        }
    }
    for sum in sums {
        sumf += sum;
    }
    sumf
}

/// `sum(bsums[j] * mins[j / 2])`: the activations' 16-value sums times their sub-block's 6-bit min.
fn k4_mins(bsums: &[i16; QK_K / 16], mins: &[u8; 8]) -> i32 {
    bsums
        .iter()
        .enumerate()
        .map(|(j, &s)| i32::from(s) * i32::from(mins[j / 2]))
        .sum()
}

/// ggml `ggml_vec_dot_q4_K_q8_K_generic`: integer sums per sub-block of 32 times its 6-bit scale, the
/// mins through the activations' `bsums`, then float as [`k_dot`] describes.
pub fn vec_dot_q4_k_q8_k(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    k_dot(x, y, |a, b| {
        let (scales, mins) = quant::scales_mins_k4(&a.scales);
        let q = quant::q4_k_values(a).map(|v| v as i8);
        KBlock {
            lanes: k_lanes(&q, &b.qs, 32, |s| i32::from(scales[s])),
            d: a.d.to_f32(),
            mins: Some((a.dmin.to_f32(), k4_mins(&b.bsums, &mins))),
        }
    })
}

/// ggml `ggml_vec_dot_q5_K_q8_K_generic`: as [`vec_dot_q4_k_q8_k`] with 5-bit values.
pub fn vec_dot_q5_k_q8_k(x: &[BlockQ5K], y: &[BlockQ8K]) -> f32 {
    k_dot(x, y, |a, b| {
        let (scales, mins) = quant::scales_mins_k4(&a.scales);
        let q = quant::q5_k_values(a).map(|v| v as i8);
        KBlock {
            lanes: k_lanes(&q, &b.qs, 32, |s| i32::from(scales[s])),
            d: a.d.to_f32(),
            mins: Some((a.dmin.to_f32(), k4_mins(&b.bsums, &mins))),
        }
    })
}

/// ggml `ggml_vec_dot_q6_K_q8_K_generic`: integer sums per sub-block of 16 times its signed 8-bit
/// scale, then float as [`k_dot`] describes (Q6_K has no mins).
pub fn vec_dot_q6_k_q8_k(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
    k_dot(x, y, |a, b| {
        let q = quant::q6_k_values(a);
        KBlock {
            lanes: k_lanes(&q, &b.qs, 16, |s| i32::from(a.scales[s])),
            d: a.d.to_f32(),
            mins: None,
        }
    })
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

/// Four Q5_0 weight rows against one activation row: four calls of [`vec_dot_q5_0_q8_0`].
pub fn vec_dot_q5_0_q8_0_x4(rows: [&[BlockQ5_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
    rows.map(|x| vec_dot_q5_0_q8_0(x, y))
}

/// Four Q5_1 weight rows against one activation row: four calls of [`vec_dot_q5_1_q8_1`].
pub fn vec_dot_q5_1_q8_1_x4(rows: [&[BlockQ5_1]; 4], y: &[BlockQ8_1]) -> [f32; 4] {
    rows.map(|x| vec_dot_q5_1_q8_1(x, y))
}

/// Four Q4_K weight rows against one activation row: four calls of [`vec_dot_q4_k_q8_k`].
pub fn vec_dot_q4_k_q8_k_x4(rows: [&[BlockQ4K]; 4], y: &[BlockQ8K]) -> [f32; 4] {
    rows.map(|x| vec_dot_q4_k_q8_k(x, y))
}

/// Four Q5_K weight rows against one activation row: four calls of [`vec_dot_q5_k_q8_k`].
pub fn vec_dot_q5_k_q8_k_x4(rows: [&[BlockQ5K]; 4], y: &[BlockQ8K]) -> [f32; 4] {
    rows.map(|x| vec_dot_q5_k_q8_k(x, y))
}

/// Four Q6_K weight rows against one activation row: four calls of [`vec_dot_q6_k_q8_k`].
pub fn vec_dot_q6_k_q8_k_x4(rows: [&[BlockQ6K]; 4], y: &[BlockQ8K]) -> [f32; 4] {
    rows.map(|x| vec_dot_q6_k_q8_k(x, y))
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

/// [`vec_dot_q5_0_q8_0`] of every row of `w` against every token of `x`, as [`gemm_q8_0_q8_0`].
pub fn gemm_q5_0_q8_0(
    w: &[BlockQ5_0],
    x: &[BlockQ8_0],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm(w, x, nb, out, layout, vec_dot_q5_0_q8_0);
}

/// [`vec_dot_q5_1_q8_1`] of every row of `w` against every token of `x`, as [`gemm_q8_0_q8_0`].
pub fn gemm_q5_1_q8_1(
    w: &[BlockQ5_1],
    x: &[BlockQ8_1],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm(w, x, nb, out, layout, vec_dot_q5_1_q8_1);
}

/// [`vec_dot_q4_k_q8_k`] of every row of `w` against every token of `x` (`nb` super-blocks each), as
/// [`gemm_q8_0_q8_0`].
pub fn gemm_q4_k_q8_k(
    w: &[BlockQ4K],
    x: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm(w, x, nb, out, layout, vec_dot_q4_k_q8_k);
}

/// [`vec_dot_q5_k_q8_k`] of every row of `w` against every token of `x`, as [`gemm_q4_k_q8_k`].
pub fn gemm_q5_k_q8_k(
    w: &[BlockQ5K],
    x: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm(w, x, nb, out, layout, vec_dot_q5_k_q8_k);
}

/// [`vec_dot_q6_k_q8_k`] of every row of `w` against every token of `x`, as [`gemm_q4_k_q8_k`].
pub fn gemm_q6_k_q8_k(
    w: &[BlockQ6K],
    x: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm(w, x, nb, out, layout, vec_dot_q6_k_q8_k);
}
