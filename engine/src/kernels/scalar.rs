//! Plain reference kernels: the definition every optimized tier is tested against.
//!
//! Names follow ggml (`vec_dot_q4_1_q8_1`: Q4_1 weights against Q8_1 activations).

use half::{bf16, f16};

use super::{
    k_numerics::{K4Block, KInts, KKind, KPath, KScales, KSum, hsum_f32x8, on_path},
    tiles::{OutLayout, each_row},
};
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

/// ggml's x86 int32 lanes of a 32-value block: lane `l` sums the products of values `4l..4l + 4`.
fn block_lanes(a: &[i8; QK], b: &[i8; QK]) -> [i32; 8] {
    std::array::from_fn(|l| {
        (4 * l..4 * l + 4)
            .map(|i| i32::from(a[i]) * i32::from(b[i]))
            .sum()
    })
}

/// A block dot as ggml's x86 code (AVX2) takes its floats: per block, its lanes fused with `d_x d_y`
/// into eight sums, summed at the end as `hsum_float_8`.
fn x86_dot<A, B>(x: &[A], y: &[B], block: impl Fn(&A, &B) -> ([i32; 8], f32)) -> f32 {
    let mut acc = [0f32; 8];
    for (a, b) in x.iter().zip(y) {
        let (lanes, d) = block(a, b);
        for (sum, &lane) in acc.iter_mut().zip(&lanes) {
            *sum = d.mul_add(lane as f32, *sum);
        }
    }
    hsum_f32x8(acc)
}

/// ggml `ggml_vec_dot_q8_0_q8_0` (x86).
pub fn vec_dot_q8_0_q8_0(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    x86_dot(x, y, |a, b| {
        (block_lanes(&a.qs, &b.qs), a.d.to_f32() * b.d.to_f32())
    })
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

/// ggml `ggml_vec_dot_q4_0_q8_0` (x86).
pub fn vec_dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    x86_dot(x, y, |a, b| {
        let q = nibbles(&a.qs).map(|v| v - 8);
        (block_lanes(&q, &b.qs), a.d.to_f32() * b.d.to_f32())
    })
}

/// ggml's repacked Q4_0 GEMV and GEMM (`q4_0_8x8`, which llama.cpp's x86 build takes for Q4_0
/// matrices whose rows come in eights): per block, the exact integer dot fused with `d_x d_y` into one
/// sum.
pub fn vec_dot_q4_0_q8_0_repacked(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    x.iter().zip(y).fold(0.0, |acc, (a, b)| {
        let q = nibbles(&a.qs);
        let sum: i32 = q
            .iter()
            .zip(&b.qs)
            .map(|(&q, &y)| i32::from(q - 8) * i32::from(y))
            .sum();
        (sum as f32).mul_add(a.d.to_f32() * b.d.to_f32(), acc)
    })
}

/// ggml `ggml_vec_dot_q5_0_q8_0` (x86).
pub fn vec_dot_q5_0_q8_0(x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
    x86_dot(x, y, |a, b| {
        let q = quant::five_bit_values(&a.qs, &a.qh).map(|v| v as i8 - 16);
        (block_lanes(&q, &b.qs), a.d.to_f32() * b.d.to_f32())
    })
}

/// ggml `ggml_vec_dot_q4_1_q8_1` (x86) and its Q5_1 twin: the lanes of the unsigned values, and
/// `m_x s_y` per block into a scalar sum (fused, as GCC contracts ggml's `summs += m * s`).
fn dot_with_minimums<A>(
    x: &[A],
    y: &[BlockQ8_1],
    block: impl Fn(&A, &BlockQ8_1) -> ([i8; QK], f32, (f16, f16)),
) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (a, b) in x.iter().zip(y) {
        let (q, d, (m, s)) = block(a, b);
        for (sum, &lane) in acc.iter_mut().zip(&block_lanes(&q, &b.qs)) {
            *sum = d.mul_add(lane as f32, *sum);
        }
        summs = m.to_f32().mul_add(s.to_f32(), summs);
    }
    hsum_f32x8(acc) + summs
}

/// ggml `ggml_vec_dot_q4_1_q8_1` (x86).
pub fn vec_dot_q4_1_q8_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    dot_with_minimums(x, y, |a, b| {
        (nibbles(&a.qs), a.d.to_f32() * b.d.to_f32(), (a.m, b.s))
    })
}

/// ggml `ggml_vec_dot_q5_1_q8_1` (x86).
pub fn vec_dot_q5_1_q8_1(x: &[BlockQ5_1], y: &[BlockQ8_1]) -> f32 {
    dot_with_minimums(x, y, |a, b| {
        let q = quant::five_bit_values(&a.qs, &a.qh).map(|v| v as i8);
        (q, a.d.to_f32() * b.d.to_f32(), (a.m, b.s))
    })
}

/// A Q4_K/Q5_K super-block's integers ([`KInts`]) from its unsigned values and 6-bit scales and
/// minimums, as ggml's x86 kernels form them.
fn k4_ints(values: &[u8; QK_K], block: &impl K4Block, y: &BlockQ8K) -> KInts {
    let (scales, mins) = quant::scales_mins_k4(block.packed_scales());
    let mut ints = KInts::default();
    for (s, &scale) in scales.iter().enumerate() {
        let scale = i32::from(scale);
        let mut sub_block = 0;
        for (l, lane) in ints.lanes.iter_mut().enumerate() {
            let at = 32 * s + 4 * l;
            let products: i32 = (at..at + 4)
                .map(|i| i32::from(values[i]) * i32::from(y.qs[i]))
                .sum();
            *lane += scale * products;
            sub_block += products;
        }
        ints.pairs[s / 2] += scale * sub_block;
    }
    for (k, m) in ints.mins.iter_mut().enumerate() {
        let sum = |s: usize| i32::from(y.bsums[2 * s]) + i32::from(y.bsums[2 * s + 1]);
        *m = i32::from(mins[2 * k]) * sum(2 * k) + i32::from(mins[2 * k + 1]) * sum(2 * k + 1);
    }
    ints
}

/// A Q4_K/Q5_K super-block's scales against an activation block.
fn k4_scales(block: &impl K4Block, y: &BlockQ8K) -> KScales {
    KScales {
        d: block.d().to_f32(),
        dmin: block.dmin().to_f32(),
        dy: y.d,
    }
}

/// A K-quant dot: each super-block's integers by `ints`, the float steps of `path`.
fn k_dot<W>(
    x: &[W],
    y: &[BlockQ8K],
    path: KPath,
    kind: KKind,
    ints: impl Fn(&W, &BlockQ8K) -> (KInts, KScales),
) -> f32 {
    on_path!(path, P => {
        let mut sum = KSum::<P>::new(kind);
        for (a, b) in x.iter().zip(y) {
            let (ints, scales) = ints(a, b);
            sum.add(&ints, scales);
        }
        sum.finish()
    })
}

/// Q4_K against Q8_K along `path`, as llama.cpp's x86 kernels compute it ([`KPath`]).
pub fn vec_dot_q4_k_q8_k(x: &[BlockQ4K], y: &[BlockQ8K], path: KPath) -> f32 {
    k_dot(x, y, path, KKind::Q4K, |a, b| {
        (k4_ints(&quant::q4_k_values(a), a, b), k4_scales(a, b))
    })
}

/// Q5_K against Q8_K along `path`: as [`vec_dot_q4_k_q8_k`] with 5-bit values.
pub fn vec_dot_q5_k_q8_k(x: &[BlockQ5K], y: &[BlockQ8K], path: KPath) -> f32 {
    k_dot(x, y, path, KKind::Q5K, |a, b| {
        (k4_ints(&quant::q5_k_values(a), a, b), k4_scales(a, b))
    })
}

/// Q6_K against Q8_K along `path`: ggml's AVX2 lanes of the unsigned 6-bit values times their
/// 16-value scales, less the `-32` offset through the activation's 16-value sums.
pub fn vec_dot_q6_k_q8_k(x: &[BlockQ6K], y: &[BlockQ8K], path: KPath) -> f32 {
    k_dot(x, y, path, KKind::Q6K, |a, b| {
        let values = quant::q6_k_values(a).map(|v| i32::from(v) + 32);
        let scale = |s: usize| i32::from(a.scales[s]);
        let mut ints = KInts::default();
        for chunk in 0..QK_K / 32 {
            for (l, lane) in ints.lanes.iter_mut().enumerate() {
                let at = 32 * chunk + 4 * l;
                let products: i32 = (at..at + 4).map(|i| values[i] * i32::from(b.qs[i])).sum();
                *lane += scale(at / 16) * products;
            }
        }
        for (l, lane) in ints.lanes.iter_mut().enumerate() {
            let offset = i32::from(b.bsums[2 * l]) * scale(2 * l)
                + i32::from(b.bsums[2 * l + 1]) * scale(2 * l + 1);
            *lane -= 32 * offset;
        }
        let scales = KScales {
            d: a.d.to_f32(),
            dmin: 0.0,
            dy: b.d,
        };
        (ints, scales)
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

/// Four Q4_0 weight rows against one activation row: four calls of [`vec_dot_q4_0_q8_0_repacked`].
pub fn vec_dot_q4_0_q8_0_repacked_x4(rows: [&[BlockQ4_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
    rows.map(|x| vec_dot_q4_0_q8_0_repacked(x, y))
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
pub fn vec_dot_q4_k_q8_k_x4(rows: [&[BlockQ4K]; 4], y: &[BlockQ8K], path: KPath) -> [f32; 4] {
    rows.map(|x| vec_dot_q4_k_q8_k(x, y, path))
}

/// Four Q5_K weight rows against one activation row: four calls of [`vec_dot_q5_k_q8_k`].
pub fn vec_dot_q5_k_q8_k_x4(rows: [&[BlockQ5K]; 4], y: &[BlockQ8K], path: KPath) -> [f32; 4] {
    rows.map(|x| vec_dot_q5_k_q8_k(x, y, path))
}

/// Four Q6_K weight rows against one activation row: four calls of [`vec_dot_q6_k_q8_k`].
pub fn vec_dot_q6_k_q8_k_x4(rows: [&[BlockQ6K]; 4], y: &[BlockQ8K], path: KPath) -> [f32; 4] {
    rows.map(|x| vec_dot_q6_k_q8_k(x, y, path))
}

/// `dot` of every row of `w` against every token of `x` (`nb` blocks each), into `out` as `layout`
/// places them.
fn gemm<W, A>(
    w: &[W],
    x: &[A],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
    dot: impl Fn(&[W], &[A]) -> f32,
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

/// [`vec_dot_q4_0_q8_0_repacked`] of every row of `w` against every token of `x`, as
/// [`gemm_q8_0_q8_0`].
pub fn gemm_q4_0_q8_0_repacked(
    w: &[BlockQ4_0],
    x: &[BlockQ8_0],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm(w, x, nb, out, layout, vec_dot_q4_0_q8_0_repacked);
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
/// [`gemm_q8_0_q8_0`], along llama.cpp's tiled product (the K-quant products of many tokens).
pub fn gemm_q4_k_q8_k(
    w: &[BlockQ4K],
    x: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm(w, x, nb, out, layout, |row, token| {
        vec_dot_q4_k_q8_k(row, token, KPath::Tiled)
    });
}

/// [`vec_dot_q4_k_q8_k`] of every row of `w` against every token of `x`, along llama.cpp's repacked
/// GEMM (the tokens of a product in whole groups of four, for a matrix it repacks).
pub fn gemm_q4_k_q8_k_repacked(
    w: &[BlockQ4K],
    x: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm(w, x, nb, out, layout, |row, token| {
        vec_dot_q4_k_q8_k(row, token, KPath::RepackedGemm)
    });
}

/// [`vec_dot_q5_k_q8_k`] of every row of `w` against every token of `x`, as [`gemm_q4_k_q8_k`].
pub fn gemm_q5_k_q8_k(
    w: &[BlockQ5K],
    x: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm(w, x, nb, out, layout, |row, token| {
        vec_dot_q5_k_q8_k(row, token, KPath::Tiled)
    });
}

/// [`vec_dot_q6_k_q8_k`] of every row of `w` against every token of `x`, as [`gemm_q4_k_q8_k`].
pub fn gemm_q6_k_q8_k(
    w: &[BlockQ6K],
    x: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm(w, x, nb, out, layout, |row, token| {
        vec_dot_q6_k_q8_k(row, token, KPath::Tiled)
    });
}
