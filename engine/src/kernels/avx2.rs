//! AVX2 + FMA + F16C kernels (tier [`KernelTier::Avx2`](super::cpu::KernelTier::Avx2)).
//!
//! The float arithmetic is ggml's x86 code, operation for operation, so that results match llama.cpp
//! bit for bit where it runs the same code:
//! - quantized dots (`ggml_vec_dot_q4_0_q8_0`, `_q4_1_q8_1` in `ggml-cpu/arch/x86/quants.c`,
//!   `__AVX2__` branch): per block, eight int32 lanes (lane `i` sums the products of bytes
//!   `4i..4i+4`) are converted to f32 and FMA'd with the broadcast f32 product of the two f16 scales
//!   into one 8-lane accumulator; `hsum_float_8` at the end. Q4_1 adds `m_x * s_y` into a separate
//!   scalar sum (fused, as GCC contracts `summs += m * s`).
//! - 5-bit and K-quant dots (`ggml_vec_dot_q5_0_q8_0`, `_q5_1_q8_1`, `_q4_K_q8_K`, `_q5_K_q8_K`,
//!   `_q6_K_q8_K`, same branch): the same eight exact int32 lanes per block (for the K-quants, each
//!   sub-block's lane sums times its scale through `vpmaddwd`, added over the super-block) times `d`
//!   into one 8-lane accumulator. Q5_1 adds `m_x * s_y` as Q4_1 does; Q4_K's minimums go through a
//!   4-lane accumulator, Q5_K's through a scalar sum (fused, as GCC contracts it), Q6_K's `-32`
//!   offset comes off the int32 lanes through the activation's 16-value sums, all as ggml does.
//! - Q8_0 x Q8_0 (`ggml_vec_dot_q8_0_q8_0`, and llama.cpp's tinyBLAS for prompts, which sums alike):
//!   the same eight lanes fused with `d_x d_y` into one 8-lane accumulator.
//! - The K-quants' float steps depend on which of llama.cpp's kernels the product takes; they live
//!   once, in `k_numerics`, and this tier forms only their exact integers.
//! - `vec_dot_f32` / `vec_dot_f16` (`ggml-cpu/vec.cpp`, `simd-mappings.h` `__AVX__` branch): four
//!   8-lane accumulators over steps of 32 elements, `GGML_F32x8_REDUCE`, leftovers one at a time
//!   (in f64 for f16).
//!
//! The integer lane sums are exact and equal ggml's; the `vpmaddubsw` int16 pair sums cannot
//! saturate for the block types here (at most `2 * 63 * 128`, Q6_K's). Q8_0 x Q8_0 uses ggml's sign
//! trick, exact while the activation side avoids -128 (as `quantize_activations_q8_0` guarantees).
//! Q4_0 forms `sum(q*y) - 8*sum(y)` from int16 pairs, the offset computed once per activation block;
//! Q5_0 likewise with 16, exact for every input. The f16 scales are read with one `vcvtph2ps` of the
//! block's first 8 bytes (the conversion is exact, so this changes no bits).
//!
//! The `_rows` forms take `R` weight rows against one activation row and share the activation loads;
//! each row's arithmetic is exactly the single-row one, so `R = 4` equals four `R = 1` calls.

#![cfg(target_arch = "x86_64")]
#![allow(unsafe_code)]

mod k_lanes;
mod q4_0_lanes;
mod q4_k_x16;
mod q6_k_x16;

pub(crate) use self::{
    k_lanes::{
        gemm_q4_k_q8_k, gemm_q4_k_q8_k_repacked, gemm_q4_k_x16_q8_k_repacked, gemm_q5_k_q8_k,
        gemm_q6_k_q8_k, gemm_q6_k_x16_q8_k,
    },
    q4_0_lanes::gemm_q4_0_q8_0_repacked,
    q4_k_x16::vec_dot_q4_k_x16_q8_k,
    q6_k_x16::vec_dot_q6_k_x16_q8_k,
};

use std::{arch::x86_64::*, cell::RefCell};

use half::f16;

use super::k_numerics::{K4Block, KInts, KKind, KPath, KScales, KSum, on_path, path};
use super::{
    tiles::{
        OutLayout, each_row, gemm_by_row_dots, pack_token_tiles, product_shape, store_tile,
        tile_rows,
    },
    x86::{
        bytes_from_nibbles_32, common_len, cut, f16_to_f32, gemm_by_dots, head_f32, hsum_float_8,
        k4_block_scales, k4_min_products, load_i8x32, load_i16x16, prefetch_blocks_ahead,
        prefetch_rows_ahead, q6_k_offset, scales_i16, scales_mins_k4, store_i32x4, store_i32x8,
        sub_block_sums, total_i32x8, totals_of_four_x8, u8x8_to_i16,
    },
};
use crate::quant::{
    BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, BlockQ8_1,
    BlockQ8K, QK, QK_K,
};

/// Elements per f32 vector.
const EPR: usize = 8;
/// Elements per step of the float dots (four accumulators).
const STEP: usize = 4 * EPR;

// ---------------------------------------------------------------------------------------------
// Loads and small helpers. Safe functions: they need the target features (callers have them), and
// every load reads from a reference of exactly the loaded size.

/// Sums each 4 consecutive u8 x i8 products into an int32 lane (`vpmaddubsw` + `vpmaddwd`).
#[target_feature(enable = "avx2")]
#[inline]
fn mul_sum_us8_pairs(ax: __m256i, sy: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(ax, sy))
}

/// ggml `GGML_F32x8_REDUCE` over four accumulators.
#[target_feature(enable = "avx2")]
#[inline]
fn reduce_f32x8(mut x: [__m256; 4]) -> f32 {
    x[0] = _mm256_add_ps(x[0], x[2]);
    x[1] = _mm256_add_ps(x[1], x[3]);
    x[0] = _mm256_add_ps(x[0], x[1]);
    let t0 = _mm_add_ps(
        _mm256_castps256_ps128(x[0]),
        _mm256_extractf128_ps::<1>(x[0]),
    );
    let t1 = _mm_hadd_ps(t0, t0);
    _mm_cvtss_f32(_mm_hadd_ps(t1, t1))
}

// ---------------------------------------------------------------------------------------------
// Float dots.

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load_f32x8(v: &[f32; EPR]) -> __m256 {
    // SAFETY: `v` is 8 readable f32; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_ps(v.as_ptr()) }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load_u32x8(v: &[u32; EPR]) -> __m256i {
    // SAFETY: `v` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(v.as_ptr().cast()) }
}

/// A tile's results by row and token from its per-token vectors, a row per lane.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn lane_results<const T: usize>(sums: [__m256; T]) -> [[f32; T]; EPR] {
    let mut lanes = [[0f32; EPR]; T];
    for (lane, sum) in lanes.iter_mut().zip(sums) {
        // SAFETY: `lane` has room for 8 f32; unaligned store.
        unsafe { _mm256_storeu_ps(lane.as_mut_ptr(), sum) };
    }
    std::array::from_fn(|r| std::array::from_fn(|t| lanes[t][r]))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load_f16x8(v: &[f16; EPR]) -> __m256 {
    // SAFETY: `v` is 8 readable f16 (16 bytes); `loadu` has no alignment requirement.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(v.as_ptr().cast()) })
}

/// ggml `ggml_vec_dot_f32` (AVX): `sum(a[i] * b[i])` over the common length.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let np = n - n % STEP;
    let (a_steps, _) = a[..np].as_chunks::<STEP>();
    let (b_steps, _) = b[..np].as_chunks::<STEP>();
    let mut sum = [_mm256_setzero_ps(); 4];
    for (xs, ys) in a_steps.iter().zip(b_steps) {
        let (xv, _) = xs.as_chunks::<EPR>();
        let (yv, _) = ys.as_chunks::<EPR>();
        for j in 0..4 {
            sum[j] = _mm256_fmadd_ps(load_f32x8(&xv[j]), load_f32x8(&yv[j]), sum[j]);
        }
    }
    let mut sumf = reduce_f32x8(sum);
    for (x, y) in a[np..n].iter().zip(&b[np..n]) {
        sumf = x.mul_add(*y, sumf);
    }
    sumf
}

/// f16 dots of `R` rows against `y`, ggml `ggml_vec_dot_f16` (AVX + F16C) per row.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_f16_rows<const R: usize>(rows: [&[f16]; R], y: &[f16]) -> [f32; R] {
    let n = common_len(&rows, y);
    let np = n - n % STEP;
    let (y_steps, _) = y[..np].as_chunks::<STEP>();
    let steps = rows.map(|r| r[..np].as_chunks::<STEP>().0);
    let mut sum = [[_mm256_setzero_ps(); 4]; R];
    for (i, ys) in y_steps.iter().enumerate() {
        let (yv, _) = ys.as_chunks::<EPR>();
        for j in 0..4 {
            let yj = load_f16x8(&yv[j]);
            for r in 0..R {
                let (xv, _) = steps[r][i].as_chunks::<EPR>();
                sum[r][j] = _mm256_fmadd_ps(load_f16x8(&xv[j]), yj, sum[r][j]);
            }
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        let mut sumf = f64::from(reduce_f32x8(sum[r]));
        for (x, yk) in rows[r][np..n].iter().zip(&y[np..n]) {
            sumf += f64::from(f16_to_f32(*x) * f16_to_f32(*yk));
        }
        out[r] = sumf as f32;
    }
    out
}

/// ggml `ggml_vec_dot_f16` (AVX + F16C): f16 inputs, f32 products and sums, leftovers in f64.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_f16(a: &[f16], b: &[f16]) -> f32 {
    dot_f16_rows([a], b)[0]
}

/// Four rows of [`vec_dot_f16`] against one activation row, two rows at a time (16 ymm registers
/// hold two rows' accumulators; four would spill).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_f16_x4(rows: [&[f16]; 4], y: &[f16]) -> [f32; 4] {
    let [a, b] = dot_f16_rows([rows[0], rows[1]], y);
    let [c, d] = dot_f16_rows([rows[2], rows[3]], y);
    [a, b, c, d]
}

// ---------------------------------------------------------------------------------------------
// Quantized dots.

/// Q8_0 x Q8_0 dots of `R` rows against `y` (ggml `ggml_vec_dot_q8_0_q8_0`, AVX2): per block, the
/// eight int32 lanes of ggml's sign trick (`|x|` times `y` with `x`'s sign, exact while `y` avoids
/// -128) fused with `d_x d_y` into one 8-lane sum; `hsum_float_8` at the end.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_q8_0_rows<const R: usize>(rows: [&[BlockQ8_0]; R], y: &[BlockQ8_0]) -> [f32; R] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let mut acc = [_mm256_setzero_ps(); R];
    for (i, b) in y[..n].iter().enumerate() {
        if R > 1 {
            prefetch_rows_ahead(&rows, i);
        }
        let qy = load_i8x32(&b.qs);
        let dy = f16_to_f32(b.d);
        for r in 0..R {
            let a = &rows[r][i];
            let qx = load_i8x32(&a.qs);
            let lanes = mul_sum_us8_pairs(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
            let d = _mm256_set1_ps(f16_to_f32(a.d) * dy);
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc[r]);
        }
    }
    acc.map(|a| hsum_float_8(a))
}

/// ggml `ggml_vec_dot_q8_0_q8_0` (AVX2).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q8_0_q8_0(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    dot_q8_0_rows([x], y)[0]
}

/// Four rows of [`vec_dot_q8_0_q8_0`] sharing the activation loads.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q8_0_q8_0_x4(rows: [&[BlockQ8_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
    dot_q8_0_rows(rows, y)
}

/// The rows of `w` (rows of `y.len()` blocks, one per entry of `out`) against one activation row:
/// one [`vec_dot_q8_0_q8_0`] per row.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemv_q8_0_q8_0(w: &[BlockQ8_0], y: &[BlockQ8_0], out: &mut [f32]) {
    // SAFETY: the caller guarantees the CPU features.
    each_row(w, y.len(), out, |row| unsafe { vec_dot_q8_0_q8_0(row, y) });
}

/// Q4_0 x Q8_0 dots of `R` rows against `y` (ggml `ggml_vec_dot_q4_0_q8_0`, AVX2). The int lanes
/// are `sum(q*y) - 8*sum(y)` over each 4 bytes, which equals ggml's `sum((q-8)*y)`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_q4_0_rows<const R: usize, const REPACKED: bool>(
    rows: [&[BlockQ4_0]; R],
    y: &[BlockQ8_0],
) -> [f32; R] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut sums = [0f32; R];
    for (i, b) in y[..n].iter().enumerate() {
        let hy = head_f32(b);
        let qy = load_i8x32(&b.qs);
        // 8 * (y[2k] + y[2k+1]) as int16 pairs; |q*y pair| <= 3810 and this <= 2032: no overflow.
        let offset = _mm256_maddubs_epi16(_mm256_set1_epi8(8), qy);
        for r in 0..R {
            let a = &rows[r][i];
            let d = _mm_mul_ss(head_f32(a), hy);
            let qx = bytes_from_nibbles_32(&a.qs);
            let pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(qx, qy), offset);
            let lanes = _mm256_madd_epi16(_mm256_set1_epi16(1), pairs);
            if REPACKED {
                let total = total_i32x8(lanes) as f32;
                sums[r] = total.mul_add(_mm_cvtss_f32(d), sums[r]);
            } else {
                let d = _mm256_broadcastss_ps(d);
                acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc[r]);
            }
        }
    }
    if REPACKED {
        sums
    } else {
        acc.map(|a| hsum_float_8(a))
    }
}

/// ggml `ggml_vec_dot_q4_0_q8_0` (AVX2).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    dot_q4_0_rows::<1, false>([x], y)[0]
}

/// Four rows of [`vec_dot_q4_0_q8_0`] sharing the activation loads.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q4_0_q8_0_x4(rows: [&[BlockQ4_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
    dot_q4_0_rows::<4, false>(rows, y)
}

/// ggml's repacked Q4_0 GEMV and GEMM (AVX2): per block, the exact integer dot fused with `d_x d_y`
/// into one sum.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q4_0_q8_0_repacked(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    dot_q4_0_rows::<1, true>([x], y)[0]
}

/// Four rows of [`vec_dot_q4_0_q8_0_repacked`] sharing the activation loads.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q4_0_q8_0_repacked_x4(
    rows: [&[BlockQ4_0]; 4],
    y: &[BlockQ8_0],
) -> [f32; 4] {
    dot_q4_0_repacked_rows4(rows, y)
}

/// Four Q4_0 rows against `y` along ggml's repacked GEMV and GEMM: per block, the exact totals of the
/// four rows reduced together and fused with `d_x d_y` into one sum a row per lane.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_q4_0_repacked_rows4(rows: [&[BlockQ4_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm_setzero_ps();
    for (i, b) in y[..n].iter().enumerate() {
        prefetch_rows_ahead(&rows, i);
        let qy = load_i8x32(&b.qs);
        // 8 * (y[2k] + y[2k+1]) as int16 pairs, as in `dot_q4_0_rows`.
        let offset = _mm256_maddubs_epi16(_mm256_set1_epi8(8), qy);
        let lanes = rows.map(|row| {
            let pairs = _mm256_maddubs_epi16(bytes_from_nibbles_32(&row[i].qs), qy);
            _mm256_madd_epi16(ones, _mm256_sub_epi16(pairs, offset))
        });
        let d = rows.map(|row| row[i].d.to_bits() as i16);
        let d_x = _mm_cvtph_ps(_mm_setr_epi16(d[0], d[1], d[2], d[3], 0, 0, 0, 0));
        let d_xy = _mm_mul_ps(d_x, _mm_set1_ps(f16_to_f32(b.d)));
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(totals_of_four_x8(lanes)), d_xy, acc);
    }
    let mut out = [0f32; 4];
    // SAFETY: `out` has room for 4 f32; unaligned store.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
    out
}

/// Q4_1 x Q8_1 dots of `R` rows against `y` (ggml `ggml_vec_dot_q4_1_q8_1`, AVX2).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_q4_1_rows<const R: usize>(rows: [&[BlockQ4_1]; R], y: &[BlockQ8_1]) -> [f32; R] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let mut acc = [_mm256_setzero_ps(); R];
    // Lane 1 of each holds the row's running `sum(m_x * s_y)`; the other lanes are ignored.
    let mut summs = [_mm_setzero_ps(); R];
    for (i, b) in y[..n].iter().enumerate() {
        if R > 1 {
            prefetch_rows_ahead(&rows, i);
        }
        let hy = head_f32(b); // [d_y, s_y, _, _]
        let s_only = _mm_blend_ps::<0b0010>(_mm_setzero_ps(), hy); // [0, s_y, 0, 0]
        let qy = load_i8x32(&b.qs);
        for r in 0..R {
            let a = &rows[r][i];
            let hx = head_f32(a); // [d_x, m_x, _, _]
            // Lane 1: fma(m_x, s_y, summs), as GCC compiles ggml's scalar `summs += m * s`.
            summs[r] = _mm_fmadd_ps(hx, s_only, summs[r]);
            let d = _mm256_broadcastss_ps(_mm_mul_ss(hx, hy));
            let qx = bytes_from_nibbles_32(&a.qs);
            let xy = _mm256_cvtepi32_ps(mul_sum_us8_pairs(qx, qy));
            acc[r] = _mm256_fmadd_ps(d, xy, acc[r]);
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum_float_8(acc[r]) + _mm_cvtss_f32(_mm_movehdup_ps(summs[r]));
    }
    out
}

/// ggml `ggml_vec_dot_q4_1_q8_1` (AVX2).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q4_1_q8_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    dot_q4_1_rows([x], y)[0]
}

/// Four rows of [`vec_dot_q4_1_q8_1`] sharing the activation loads.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q4_1_q8_1_x4(rows: [&[BlockQ4_1]; 4], y: &[BlockQ8_1]) -> [f32; 4] {
    dot_q4_1_rows(rows, y)
}

// ---------------------------------------------------------------------------------------------
// 5-bit and K-quant dots.

/// The 32 fifth bits of a Q5_0/Q5_1 block (element `j` in bit `j` of `qh`) as bytes: `0x10` where the
/// bit is set, 0 elsewhere, in the element order of [`bytes_from_nibbles_32`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn fifth_bits_32(qh: [u8; 4]) -> __m256i {
    // Byte `j` takes byte `j / 8` of the word, then keeps bit `j % 8`.
    let word = _mm256_set1_epi32(i32::from_le_bytes(qh));
    let spread = _mm256_shuffle_epi8(
        word,
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// The 32 values of a 5-bit block, 0..=31, in element order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn five_bit_values(qs: &[u8; QK / 2], qh: [u8; 4]) -> __m256i {
    _mm256_or_si256(bytes_from_nibbles_32(qs), fifth_bits_32(qh))
}

/// Q5_0 x Q8_0 dots of `R` rows against `y` (ggml `ggml_vec_dot_q5_0_q8_0`, AVX2). The int lanes
/// are `sum(q*y) - 16*sum(y)` over each 4 bytes, which equals ggml's `sum((q-16)*y)`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_q5_0_rows<const R: usize>(rows: [&[BlockQ5_0]; R], y: &[BlockQ8_0]) -> [f32; R] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let mut acc = [_mm256_setzero_ps(); R];
    for (i, b) in y[..n].iter().enumerate() {
        if R > 1 {
            prefetch_rows_ahead(&rows, i);
        }
        let hy = head_f32(b);
        let qy = load_i8x32(&b.qs);
        // 16 * (y[2k] + y[2k+1]) as int16 pairs; |q*y pair| <= 7936 and this <= 4096: no overflow.
        let offset = _mm256_maddubs_epi16(_mm256_set1_epi8(16), qy);
        for r in 0..R {
            let a = &rows[r][i];
            let d = _mm256_broadcastss_ps(_mm_mul_ss(head_f32(a), hy));
            let qx = five_bit_values(&a.qs, a.qh);
            let pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(qx, qy), offset);
            let sums = _mm256_madd_epi16(_mm256_set1_epi16(1), pairs);
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sums), acc[r]);
        }
    }
    acc.map(|a| hsum_float_8(a))
}

/// ggml `ggml_vec_dot_q5_0_q8_0` (AVX2).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q5_0_q8_0(x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
    dot_q5_0_rows([x], y)[0]
}

/// Four rows of [`vec_dot_q5_0_q8_0`] sharing the activation loads.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q5_0_q8_0_x4(rows: [&[BlockQ5_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
    dot_q5_0_rows(rows, y)
}

/// Q5_1 x Q8_1 dots of `R` rows against `y` (ggml `ggml_vec_dot_q5_1_q8_1`, AVX2): as Q4_1 with
/// the fifth bits added to the nibbles.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_q5_1_rows<const R: usize>(rows: [&[BlockQ5_1]; R], y: &[BlockQ8_1]) -> [f32; R] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let mut acc = [_mm256_setzero_ps(); R];
    // Lane 1 of each holds the row's running `sum(m_x * s_y)`; the other lanes are ignored.
    let mut summs = [_mm_setzero_ps(); R];
    for (i, b) in y[..n].iter().enumerate() {
        if R > 1 {
            prefetch_rows_ahead(&rows, i);
        }
        let hy = head_f32(b); // [d_y, s_y, _, _]
        let s_only = _mm_blend_ps::<0b0010>(_mm_setzero_ps(), hy); // [0, s_y, 0, 0]
        let qy = load_i8x32(&b.qs);
        for r in 0..R {
            let a = &rows[r][i];
            let hx = head_f32(a); // [d_x, m_x, _, _]
            summs[r] = _mm_fmadd_ps(hx, s_only, summs[r]);
            let d = _mm256_broadcastss_ps(_mm_mul_ss(hx, hy));
            let qx = five_bit_values(&a.qs, a.qh);
            let xy = _mm256_cvtepi32_ps(mul_sum_us8_pairs(qx, qy));
            acc[r] = _mm256_fmadd_ps(d, xy, acc[r]);
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum_float_8(acc[r]) + _mm_cvtss_f32(_mm_movehdup_ps(summs[r]));
    }
    out
}

/// ggml `ggml_vec_dot_q5_1_q8_1` (AVX2).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q5_1_q8_1(x: &[BlockQ5_1], y: &[BlockQ8_1]) -> f32 {
    dot_q5_1_rows([x], y)[0]
}

/// Four rows of [`vec_dot_q5_1_q8_1`] sharing the activation loads.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q5_1_q8_1_x4(rows: [&[BlockQ5_1]; 4], y: &[BlockQ8_1]) -> [f32; 4] {
    dot_q5_1_rows(rows, y)
}

#[target_feature(enable = "avx2")]
#[inline]
fn load_u8x32(v: &[u8; 32]) -> __m256i {
    // SAFETY: `v` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(v.as_ptr().cast()) }
}

/// `v` with i16 number `lo` of each 128-bit half in every i16 of the low half, and number `hi` in
/// every i16 of the high half.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn spread_i16(v: __m256i, lo: i32, hi: i32) -> __m256i {
    let bytes = |k: i32| ((2 * k) | ((2 * k + 1) << 8)) as i16;
    let index = _mm256_set_m128i(_mm_set1_epi16(bytes(hi)), _mm_set1_epi16(bytes(lo)));
    _mm256_shuffle_epi8(v, index)
}

/// The integers of a Q4_K/Q5_K super-block's dot ([`KInts`]), as ggml's AVX2 code forms its lanes:
/// lane `l` adds, over every 32-value sub-block, its scale times the products of its bytes
/// `4l..4l+4`; when `PAIRS`, each 64 values' total too. `scales` holds the eight sub-block scales as
/// i16 in both halves; `qh`, for Q5_K, the fifth bits.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn k4_ints<const P: u8>(
    qs: &[u8; QK_K / 2],
    qh: Option<&[u8; QK_K / 8]>,
    scales: __m256i,
    q8: &[i8; QK_K],
) -> KInts {
    const { assert!(P <= path::REPACKED_GEMM) };
    let low4 = _mm256_set1_epi8(0x0f);
    let fifth = _mm256_set1_epi8(0x10);
    let (q4, _) = qs.as_chunks::<32>();
    let (q8, _) = q8.as_chunks::<QK>();
    // After `k` shifts, bit 0 of each byte is that byte's bit `k`: sub-block `k`'s fifth bit.
    let mut high = match qh {
        Some(h) => load_u8x32(h),
        None => _mm256_setzero_si256(),
    };
    let mut ints = KInts::default();
    let mut sumi = _mm256_setzero_si256();
    for j in 0..QK_K / 64 {
        let bits = load_u8x32(&q4[j]);
        let mut lo = _mm256_and_si256(bits, low4);
        let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), low4);
        if qh.is_some() {
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16::<4>(high), fifth));
            high = _mm256_srli_epi16::<1>(high);
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16::<4>(high), fifth));
            high = _mm256_srli_epi16::<1>(high);
        }
        let s = 2 * j as i32;
        let p_lo = _mm256_maddubs_epi16(lo, load_i8x32(&q8[2 * j]));
        let p_hi = _mm256_maddubs_epi16(hi, load_i8x32(&q8[2 * j + 1]));
        let p_lo = _mm256_madd_epi16(spread_i16(scales, s, s), p_lo);
        let p_hi = _mm256_madd_epi16(spread_i16(scales, s + 1, s + 1), p_hi);
        let pair = _mm256_add_epi32(p_lo, p_hi);
        if P == path::REPACKED_GEMM {
            ints.pairs[j] = store_i32x8(pair).iter().sum();
        }
        sumi = _mm256_add_epi32(sumi, pair);
    }
    ints.lanes = store_i32x8(sumi);
    ints
}

/// Q4_K/Q5_K x Q8_K dots of `R` rows against `y` along path `P`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_k4_rows<W: K4Block, const R: usize, const P: u8>(
    rows: [&[W]; R],
    y: &[BlockQ8K],
) -> [f32; R] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let mut sums = [KSum::<P>::new(W::KIND); R];
    for (i, b) in y[..n].iter().enumerate() {
        if R > 1 {
            prefetch_blocks_ahead(&rows, i);
        }
        let sub_sums = sub_block_sums(b);
        for r in 0..R {
            let a = &rows[r][i];
            let (scales, mins) = scales_mins_k4(a.packed_scales());
            let scales = _mm256_broadcastsi128_si256(u8x8_to_i16(scales));
            let mut ints = k4_ints::<P>(a.qs(), a.qh(), scales, &b.qs);
            ints.mins = store_i32x4(k4_min_products(mins, sub_sums));
            sums[r].add(&ints, k4_block_scales(a, b.d));
        }
    }
    sums.map(KSum::finish)
}

/// ggml's Q4_K x Q8_K dot along `path` (AVX2).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q4_k_q8_k(x: &[BlockQ4K], y: &[BlockQ8K], path: KPath) -> f32 {
    on_path!(path, P => dot_k4_rows::<_, 1, P>([x], y)[0])
}

/// Four rows of [`vec_dot_q4_k_q8_k`] sharing the activation sums, the rows ahead prefetched.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q4_k_q8_k_x4(
    rows: [&[BlockQ4K]; 4],
    y: &[BlockQ8K],
    path: KPath,
) -> [f32; 4] {
    on_path!(path, P => dot_k4_rows::<_, 4, P>(rows, y))
}

/// ggml's Q5_K x Q8_K dot along `path` (AVX2).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q5_k_q8_k(x: &[BlockQ5K], y: &[BlockQ8K], path: KPath) -> f32 {
    on_path!(path, P => dot_k4_rows::<_, 1, P>([x], y)[0])
}

/// Four rows of [`vec_dot_q5_k_q8_k`] sharing the activation sums, the rows ahead prefetched.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q5_k_q8_k_x4(
    rows: [&[BlockQ5K]; 4],
    y: &[BlockQ8K],
    path: KPath,
) -> [f32; 4] {
    on_path!(path, P => dot_k4_rows::<_, 4, P>(rows, y))
}

/// The int32 lanes of a Q6_K super-block's scaled sums of its unsigned 6-bit values (the `-32` offset
/// left out), as ggml's AVX2 code forms them: lane `l` adds, over every 16-value sub-block, its scale
/// times the products of its bytes `4l..4l+4` of each 32 values.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q6_k_scaled_sums(x: &BlockQ6K, q8: &[i8; QK_K]) -> __m256i {
    let low4 = _mm256_set1_epi8(0x0f);
    let high2 = _mm256_set1_epi8(0x30);
    let (ql, _) = x.ql.as_chunks::<32>();
    let (qh, _) = x.qh.as_chunks::<32>();
    let (scales, _) = x.scales.as_chunks::<8>();
    let (q8, _) = q8.as_chunks::<QK>();
    let mut sumi = _mm256_setzero_si256();
    // Each 128 values: low nibbles of `ql[0..64]`, then high nibbles, with the 2-bit pairs of
    // `qh[0..32]` from its lowest to its highest bits.
    for j in 0..QK_K / 128 {
        let sc = _mm256_broadcastsi128_si256(scales_i16(&scales[j]));
        let (l0, l1, h) = (
            load_u8x32(&ql[2 * j]),
            load_u8x32(&ql[2 * j + 1]),
            load_u8x32(&qh[j]),
        );
        let q = [
            _mm256_or_si256(
                _mm256_and_si256(l0, low4),
                _mm256_and_si256(_mm256_slli_epi16::<4>(h), high2),
            ),
            _mm256_or_si256(
                _mm256_and_si256(l1, low4),
                _mm256_and_si256(_mm256_slli_epi16::<2>(h), high2),
            ),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(l0), low4),
                _mm256_and_si256(h, high2),
            ),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(l1), low4),
                _mm256_and_si256(_mm256_srli_epi16::<2>(h), high2),
            ),
        ];
        for (k, q) in q.into_iter().enumerate() {
            let p = _mm256_maddubs_epi16(q, load_i8x32(&q8[4 * j + k]));
            let s = 2 * k as i32;
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(spread_i16(sc, s, s + 1), p));
        }
    }
    sumi
}

/// Q6_K x Q8_K dots of `R` rows against `y` along `path`: per super-block, ggml's AVX2 int32 lanes
/// less the offset's.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_q6_k_rows<const R: usize, const P: u8>(rows: [&[BlockQ6K]; R], y: &[BlockQ8K]) -> [f32; R] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let mut sums = [KSum::<P>::new(KKind::Q6K); R];
    for (i, b) in y[..n].iter().enumerate() {
        if R > 1 {
            prefetch_blocks_ahead(&rows, i);
        }
        let bsums = load_i16x16(&b.bsums);
        for r in 0..R {
            let a = &rows[r][i];
            let sumi = _mm256_sub_epi32(q6_k_scaled_sums(a, &b.qs), q6_k_offset(a, bsums));
            let mut ints = KInts::default();
            if P == path::VEC_DOT {
                ints.lanes = store_i32x8(sumi);
            } else {
                ints.lanes[0] = store_i32x8(sumi).iter().sum();
            }
            let scales = KScales {
                d: f16_to_f32(a.d),
                dmin: 0.0,
                dy: b.d,
            };
            sums[r].add(&ints, scales);
        }
    }
    sums.map(KSum::finish)
}

/// ggml's Q6_K x Q8_K dot along `path` (AVX2).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q6_k_q8_k(x: &[BlockQ6K], y: &[BlockQ8K], path: KPath) -> f32 {
    on_path!(path, P => dot_q6_k_rows::<1, P>([x], y)[0])
}

/// Four rows of [`vec_dot_q6_k_q8_k`] sharing the activation loads, the rows ahead prefetched.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q6_k_q8_k_x4(
    rows: [&[BlockQ6K]; 4],
    y: &[BlockQ8K],
    path: KPath,
) -> [f32; 4] {
    on_path!(path, P => dot_q6_k_rows::<4, P>(rows, y))
}

// ---------------------------------------------------------------------------------------------
// Tiled products (prefill): register tiles of `TILE_ROWS` weight rows by `TILE_TOKENS` tokens.
//
// Every (row, token) of a tile keeps its own 8-lane accumulator and goes through exactly the per-block
// operations of the single-row dots above, so every result has the single-row call's bits. The scale
// product `d_x * d_y` is the same f32 product in whatever lane it is formed, so one 8-lane multiply
// per block forms all of a tile's products, in a pass of their own; the tile kernel then broadcasts
// them from memory. Each call first unpacks its tokens, `TILE_TOKENS` at a time, into [`TokensQ8`],
// [`TokensQ8_0`] or [`TokensQ8_1`] (f32 scales, and for Q4_0 the offsets the single-row dot computes
// per block), once per token rather than once per row tile; the last tile of tokens is padded with
// zero tokens, whose results are dropped.

/// Weight rows per register tile.
const TILE_ROWS: usize = 4;
/// Tokens per register tile.
const TILE_TOKENS: usize = 2;
/// Scale products per tile: lane `r * TILE_TOKENS + t` for row `r` and token `t`.
const TILE: usize = TILE_ROWS * TILE_TOKENS;
const _: () = assert!(
    TILE == EPR,
    "a tile's scale products fill one 8-lane vector"
);

/// One block of `TILE_TOKENS` tokens' Q8_0 activations, as the Q8_0 and Q4_0 tile kernels read it.
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
struct TokensQ8 {
    qs: [[i8; QK]; TILE_TOKENS],
    /// Per token, the int16 pairs `8 * (y[2k] + y[2k+1])` the single-row Q4_0 dot subtracts.
    offset: [[i16; 16]; TILE_TOKENS],
    d: [f32; TILE_TOKENS],
}

/// One block of `TILE_TOKENS` tokens' Q8_1 activations, as the Q4_1 tile kernel reads it.
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
struct TokensQ8_1 {
    qs: [[i8; QK]; TILE_TOKENS],
    d: [f32; TILE_TOKENS],
    s: [f32; TILE_TOKENS],
}

/// One f16 field of one block of a row tile's rows (or a tile's scale products), as f32: lane
/// `r * TILE_TOKENS + t` for row `r` and token `t`.
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
struct RowScales([f32; TILE]);

/// The scales of the row tile in progress (as [`RowScales`], one per block) and the scale products of
/// its tile in progress.
#[derive(Default)]
struct RowTileScratch {
    d: Vec<RowScales>,
    m: Vec<RowScales>,
    products: Vec<RowScales>,
}

/// Per-thread buffers of the tiled products: allocated on a thread's first product, then reused.
#[derive(Default)]
struct TileScratch {
    q8: Vec<TokensQ8>,
    q8_0: Vec<TokensQ8_0>,
    q8_rows: Vec<RowsQ8>,
    q8_acc: Vec<TileAcc>,
    q8_1: Vec<TokensQ8_1>,
    rows: RowTileScratch,
}

thread_local! {
    static SCRATCH: RefCell<TileScratch> = RefCell::new(TileScratch::default());
}

/// Reads one f16 field (scale or minimum) of a weight block.
type BlockField<W> = fn(&W) -> f16;

/// Packed activations: one block of a tile of tokens.
trait PackedTokens {
    /// The tokens' scales.
    fn d(&self) -> &[f32; TILE_TOKENS];
}

impl PackedTokens for TokensQ8 {
    fn d(&self) -> &[f32; TILE_TOKENS] {
        &self.d
    }
}

impl PackedTokens for TokensQ8_1 {
    fn d(&self) -> &[f32; TILE_TOKENS] {
        &self.d
    }
}

/// Unpacks `x` (tokens of `nb` blocks) into `out`, `nb` entries per tile of tokens.
#[target_feature(enable = "avx2,fma,f16c")]
fn pack_q8(x: &[BlockQ8_0], nb: usize, out: &mut Vec<TokensQ8>) {
    pack_token_tiles::<TILE_TOKENS, _, _>((x, nb), out, |p, lane, b| {
        p.qs[lane] = b.qs;
        p.d[lane] = f16_to_f32(b.d);
        let offset = _mm256_maddubs_epi16(_mm256_set1_epi8(8), load_i8x32(&b.qs));
        // SAFETY: `p.offset[lane]` is 16 i16 (32 bytes); unaligned store.
        unsafe { _mm256_storeu_si256(p.offset[lane].as_mut_ptr().cast(), offset) };
    });
}

/// Unpacks `x` (tokens of `nb` blocks) into `out`, `nb` entries per tile of tokens.
#[target_feature(enable = "avx2,fma,f16c")]
fn pack_q8_1(x: &[BlockQ8_1], nb: usize, out: &mut Vec<TokensQ8_1>) {
    pack_token_tiles::<TILE_TOKENS, _, _>((x, nb), out, |p, lane, b| {
        p.qs[lane] = b.qs;
        p.d[lane] = f16_to_f32(b.d);
        p.s[lane] = f16_to_f32(b.s);
    });
}

/// `field` of every block of `rows`, as [`RowScales`], into `out`: per block, the rows' four f16
/// values widened together and each spread over its row's token lanes.
#[target_feature(enable = "avx2,fma,f16c")]
fn row_scales<W>(rows: &[&[W]; TILE_ROWS], field: impl Fn(&W) -> f16, out: &mut Vec<RowScales>) {
    const { assert!(TILE_ROWS == 4 && TILE_TOKENS == 2) };
    let nb = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    let spread = _mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0);
    out.clear();
    out.resize(nb, RowScales::default());
    // A plain loop: a closure here would be called per block rather than inlined.
    for (i, scales) in out.iter_mut().enumerate() {
        let bits = |r: usize| field(&rows[r][i]).to_bits() as i16;
        let (a, b, c, d) = (bits(0), bits(1), bits(2), bits(3));
        let four = _mm_cvtph_ps(_mm_set_epi16(0, 0, 0, 0, d, c, b, a));
        let lanes = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(four), spread);
        // SAFETY: `scales.0` is 8 f32; unaligned store.
        unsafe { _mm256_storeu_ps(scales.0.as_mut_ptr(), lanes) };
    }
}

/// `TILE_TOKENS` f32 repeated over the 8 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn tokens_f32(v: &[f32; TILE_TOKENS]) -> __m256 {
    const { assert!(TILE_TOKENS == 2) };
    // SAFETY: `v` is 8 readable bytes; `broadcast_sd` reads 8 bytes, unaligned.
    _mm256_castpd_ps(unsafe { _mm256_broadcast_sd(&*v.as_ptr().cast::<f64>()) })
}

/// Every scale product of a tile, block by block, into `out`: lane `k` of block `i` is
/// `rows[i][k] * token_d(i)[k % TILE_TOKENS]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn scale_products<'a>(
    rows: &[RowScales],
    token_d: impl Iterator<Item = &'a [f32; TILE_TOKENS]>,
    out: &mut Vec<RowScales>,
) {
    out.clear();
    out.resize(rows.len(), RowScales::default());
    for ((dx, dy), d) in rows.iter().zip(token_d).zip(out.iter_mut()) {
        // SAFETY: `dx` and `d` are 8 f32; unaligned accesses.
        unsafe {
            _mm256_storeu_ps(
                d.0.as_mut_ptr(),
                _mm256_mul_ps(load_f32x8(&dx.0), tokens_f32(dy)),
            )
        };
    }
}

/// Q4_0 x Q8_0 dots of `R` rows against one tile of tokens (`nb` entries).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_q4_0_tile<const R: usize>(
    rows: [&[BlockQ4_0]; R],
    tokens: &[TokensQ8],
    products: &[RowScales],
) -> [[f32; TILE_TOKENS]; R] {
    let n = common_len(&rows, tokens).min(products.len());
    let (rows, tokens, products) = (cut(rows, n), &tokens[..n], &products[..n]);
    let mut acc = [[_mm256_setzero_ps(); TILE_TOKENS]; R];
    for i in 0..n {
        let (p, d) = (&tokens[i], &products[i].0);
        let qy = p.qs.each_ref().map(|q| load_i8x32(q));
        for r in 0..R {
            let qx = bytes_from_nibbles_32(&rows[r][i].qs);
            for t in 0..TILE_TOKENS {
                let pairs =
                    _mm256_sub_epi16(_mm256_maddubs_epi16(qx, qy[t]), load_i16x16(&p.offset[t]));
                let sums = _mm256_madd_epi16(_mm256_set1_epi16(1), pairs);
                let dk = _mm256_set1_ps(d[r * TILE_TOKENS + t]);
                acc[r][t] = _mm256_fmadd_ps(dk, _mm256_cvtepi32_ps(sums), acc[r][t]);
            }
        }
    }
    acc.map(|row| row.map(|a| hsum_float_8(a)))
}

/// One block of a tile of Q8_0 rows, as the Q8_0 tile kernel reads it: aligned, the sign trick's
/// `|x|` formed once, and each row's scale spread over its tokens' lanes of the tile's scale
/// products (lane `r * TILE_TOKENS + t`).
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
struct RowsQ8 {
    x: [[i8; QK]; TILE_ROWS],
    abs: [[i8; QK]; TILE_ROWS],
    d: RowScales,
}

/// One block of a tile of tokens' Q8_0 activations, as the Q8_0 tile kernel reads it.
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
struct TokensQ8_0 {
    qs: [[i8; QK]; TILE_TOKENS],
    d: [f32; TILE_TOKENS],
}

/// Unpacks `x` (tokens of `nb` blocks) into `out`, `nb` entries per tile of tokens.
#[target_feature(enable = "avx2,fma,f16c")]
fn pack_q8_0(x: &[BlockQ8_0], nb: usize, out: &mut Vec<TokensQ8_0>) {
    pack_token_tiles::<TILE_TOKENS, _, _>((x, nb), out, |p, lane, b| {
        p.qs[lane] = b.qs;
        p.d[lane] = f16_to_f32(b.d);
    });
}

/// Unpacks a tile of Q8_0 rows (`nb` blocks each) onto the end of `out`.
#[target_feature(enable = "avx2,fma,f16c")]
fn pack_q8_rows(rows: &[&[BlockQ8_0]; TILE_ROWS], out: &mut Vec<RowsQ8>) {
    let nb = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    let start = out.len();
    out.resize(start + nb, RowsQ8::default());
    for (i, p) in out[start..].iter_mut().enumerate() {
        for (r, row) in rows.iter().enumerate() {
            let b = &row[i];
            let qx = load_i8x32(&b.qs);
            // SAFETY: `p.x[r]` and `p.abs[r]` are 32 writable bytes each; unaligned stores.
            unsafe {
                _mm256_storeu_si256(p.x[r].as_mut_ptr().cast(), qx);
                _mm256_storeu_si256(p.abs[r].as_mut_ptr().cast(), _mm256_sign_epi8(qx, qx));
            }
            p.d.0[r * TILE_TOKENS..(r + 1) * TILE_TOKENS].fill(f16_to_f32(b.d));
        }
    }
}

/// Blocks of a Q8_0 tile whose scale products are formed together, before their dots.
const Q8_0_CHUNK: usize = 16;

/// Row tiles of a Q8_0 product walked together, so that each chunk of a tile of tokens, read once
/// from the second-level cache, serves all of them from the first.
const Q8_0_GROUP: usize = 4;

/// A Q8_0 tile's accumulators: ggml's eight float lanes per (row, token).
type TileAcc = [[__m256; TILE_TOKENS]; TILE_ROWS];

/// Adds the Q8_0 x Q8_0 dots of a chunk of a tile of packed rows against the same chunk of a tile of
/// tokens (at most [`Q8_0_CHUNK`] blocks) to `acc`: per (row, token), the single-row dot's sign
/// trick, lanes and fused multiply-add with `d_x d_y`. The chunk's scale products are formed first,
/// eight in one multiply, and broadcast from memory, so the accumulators, tokens, `|x|` and the
/// constant stay in the sixteen registers.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_q8_0_chunk(
    rows: &[RowsQ8],
    tokens: &[TokensQ8_0],
    products: &mut [RowScales; Q8_0_CHUNK],
    acc: &mut TileAcc,
) {
    let n = rows.len().min(tokens.len()).min(Q8_0_CHUNK);
    let (rows, tokens) = (&rows[..n], &tokens[..n]);
    let ones = _mm256_set1_epi16(1);
    for ((w, p), d) in rows.iter().zip(tokens).zip(products.iter_mut()) {
        let dxy = _mm256_mul_ps(load_f32x8(&w.d.0), tokens_f32(&p.d));
        // SAFETY: `d.0` is 8 writable f32; unaligned store.
        unsafe { _mm256_storeu_ps(d.0.as_mut_ptr(), dxy) };
    }
    let mut sums = *acc;
    for ((w, p), d) in rows.iter().zip(tokens).zip(products.iter()) {
        let qy = p.qs.each_ref().map(|q| load_i8x32(q));
        for (r, sums) in sums.iter_mut().enumerate() {
            let (qx, ax) = (load_i8x32(&w.x[r]), load_i8x32(&w.abs[r]));
            for (t, sum) in sums.iter_mut().enumerate() {
                let sy = _mm256_sign_epi8(qy[t], qx);
                let lanes = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(ax, sy));
                let dk = _mm256_set1_ps(d.0[r * TILE_TOKENS + t]);
                *sum = _mm256_fmadd_ps(dk, _mm256_cvtepi32_ps(lanes), *sum);
            }
        }
    }
    *acc = sums;
}

/// Q4_1 x Q8_1 dots of `R` rows against one tile of tokens (`nb` entries). The tile's sums
/// `m_x * s_y` share one 8-lane vector laid out like its scale products: per block, the same fused
/// multiply-add as the single-row dot's lane 1.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_q4_1_tile<const R: usize>(
    rows: [&[BlockQ4_1]; R],
    tokens: &[TokensQ8_1],
    products: &[RowScales],
    row_m: &[RowScales],
) -> [[f32; TILE_TOKENS]; R] {
    let n = common_len(&rows, tokens)
        .min(products.len())
        .min(row_m.len());
    let (rows, tokens) = (cut(rows, n), &tokens[..n]);
    let (products, row_m) = (&products[..n], &row_m[..n]);
    let mut acc = [[_mm256_setzero_ps(); TILE_TOKENS]; R];
    let mut summs = _mm256_setzero_ps();
    for i in 0..n {
        let (p, d) = (&tokens[i], &products[i].0);
        summs = _mm256_fmadd_ps(load_f32x8(&row_m[i].0), tokens_f32(&p.s), summs);
        let qy = p.qs.each_ref().map(|q| load_i8x32(q));
        for r in 0..R {
            let qx = bytes_from_nibbles_32(&rows[r][i].qs);
            for t in 0..TILE_TOKENS {
                let xy = _mm256_cvtepi32_ps(mul_sum_us8_pairs(qx, qy[t]));
                let dk = _mm256_set1_ps(d[r * TILE_TOKENS + t]);
                acc[r][t] = _mm256_fmadd_ps(dk, xy, acc[r][t]);
            }
        }
    }
    let mut sums = [0f32; TILE];
    // SAFETY: `sums` has room for 8 f32; unaligned store.
    unsafe { _mm256_storeu_ps(sums.as_mut_ptr(), summs) };
    let mut out = [[0f32; TILE_TOKENS]; R];
    for r in 0..R {
        for t in 0..TILE_TOKENS {
            out[r][t] = hsum_float_8(acc[r][t]) + sums[r * TILE_TOKENS + t];
        }
    }
    out
}

/// Runs `kernel` on every tile of the product of `w` (rows of `nb` blocks, scales `scale` and, for
/// Q4_1, minimums `minimum`) by the packed tokens `packed` (`nb` entries per tile, `tokens` real ones),
/// and stores the real rows' and tokens' results. A block of rows goes across every token before the
/// next, so its rows stay in the first-level cache while the packed tokens stream past them. `kernel`
/// gets the tile's rows, its tokens, its scale products and the rows' minimums.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn over_tiles<W, P: PackedTokens>(
    (w, nb): (&[W], usize),
    (packed, tokens): (&[P], usize),
    (out, layout): (&mut [f32], OutLayout),
    (scale, minimum): (BlockField<W>, Option<BlockField<W>>),
    s: &mut RowTileScratch,
    kernel: impl Fn(
        [&[W]; TILE_ROWS],
        &[P],
        &[RowScales],
        &[RowScales],
    ) -> [[f32; TILE_TOKENS]; TILE_ROWS],
) {
    let rows = w.len() / nb;
    for first_row in (0..rows).step_by(TILE_ROWS) {
        let tile = tile_rows::<TILE_ROWS, _>(w, nb, first_row);
        row_scales(&tile, scale, &mut s.d);
        if let Some(minimum) = minimum {
            row_scales(&tile, minimum, &mut s.m);
        }
        for (j, entries) in packed.chunks_exact(nb).enumerate() {
            let first_token = j * TILE_TOKENS;
            scale_products(&s.d, entries.iter().map(P::d), &mut s.products);
            let values = kernel(tile, entries, &s.products, &s.m);
            let real = (rows - first_row, tokens - first_token);
            store_tile(out, layout, (first_row, first_token), real, values);
        }
    }
}

/// [`vec_dot_q8_0_q8_0`] of every row of `w` against every token of `x` (`nb` blocks each), into
/// `out` as `layout` places them: register tiles of four rows (packed once per call, [`RowsQ8`]) by
/// two packed tokens, the bits of the single-row dots. [`Q8_0_GROUP`] tiles of rows are walked
/// together in chunks of [`Q8_0_CHUNK`] blocks, which stay in the first-level cache while every
/// tile of tokens passes over them; each tile's accumulators wait in memory between chunks, and
/// every lane still takes its blocks in order.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q8_0_q8_0(
    w: &[BlockQ8_0],
    x: &[BlockQ8_0],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    let Some((rows, tokens)) = product_shape(w, x, nb) else {
        return;
    };
    let token_tiles = tokens.div_ceil(TILE_TOKENS);
    let mut products = [RowScales::default(); Q8_0_CHUNK];
    SCRATCH.with_borrow_mut(|s| {
        pack_q8_0(x, nb, &mut s.q8_0);
        for first_row in (0..rows).step_by(TILE_ROWS * Q8_0_GROUP) {
            let tiles = (rows - first_row).div_ceil(TILE_ROWS).min(Q8_0_GROUP);
            s.q8_rows.clear();
            for g in 0..tiles {
                let tile = tile_rows::<TILE_ROWS, _>(w, nb, first_row + g * TILE_ROWS);
                pack_q8_rows(&tile, &mut s.q8_rows);
            }
            s.q8_acc.clear();
            s.q8_acc.resize(
                tiles * token_tiles,
                [[_mm256_setzero_ps(); TILE_TOKENS]; TILE_ROWS],
            );
            for start in (0..nb).step_by(Q8_0_CHUNK) {
                let end = (start + Q8_0_CHUNK).min(nb);
                for (j, token_tile) in s.q8_0.chunks_exact(nb).enumerate() {
                    for (g, rows) in s.q8_rows.chunks_exact(nb).enumerate() {
                        let acc = &mut s.q8_acc[g * token_tiles + j];
                        let (rows, tokens) = (&rows[start..end], &token_tile[start..end]);
                        dot_q8_0_chunk(rows, tokens, &mut products, acc);
                    }
                }
            }
            for (g, accs) in s.q8_acc.chunks_exact(token_tiles).enumerate() {
                let first_row = first_row + g * TILE_ROWS;
                for (j, acc) in accs.iter().enumerate() {
                    let values = acc.map(|row| row.map(|a| hsum_float_8(a)));
                    let first_token = j * TILE_TOKENS;
                    let real = (rows - first_row, tokens - first_token);
                    store_tile(out, layout, (first_row, first_token), real, values);
                }
            }
        }
    });
}

/// [`vec_dot_q4_0_q8_0`] of every row of `w` against every token of `x`, as [`gemm_q8_0_q8_0`].
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q4_0_q8_0(
    w: &[BlockQ4_0],
    x: &[BlockQ8_0],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    let Some(tokens) = x.len().checked_div(nb) else {
        return;
    };
    SCRATCH.with_borrow_mut(|s| {
        pack_q8(x, nb, &mut s.q8);
        over_tiles(
            (w, nb),
            (&s.q8, tokens),
            (out, layout),
            (|b| b.d, None),
            &mut s.rows,
            |rows, p, d, _| dot_q4_0_tile(rows, p, d),
        );
    });
}

/// [`vec_dot_q4_1_q8_1`] of every row of `w` against every token of `x`, as [`gemm_q8_0_q8_0`].
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q4_1_q8_1(
    w: &[BlockQ4_1],
    x: &[BlockQ8_1],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    let Some(tokens) = x.len().checked_div(nb) else {
        return;
    };
    SCRATCH.with_borrow_mut(|s| {
        pack_q8_1(x, nb, &mut s.q8_1);
        over_tiles(
            (w, nb),
            (&s.q8_1, tokens),
            (out, layout),
            (|b| b.d, Some(|b| b.m)),
            &mut s.rows,
            |rows, p, d, m| dot_q4_1_tile(rows, p, d, m),
        );
    });
}

// The tiled forms of the 5-bit types: this tier's single-row and four-row dots over every row and
// token.
gemm_by_dots! {
    gemm_q5_0_q8_0: BlockQ5_0, BlockQ8_0 => vec_dot_q5_0_q8_0, vec_dot_q5_0_q8_0_x4;
    gemm_q5_1_q8_1: BlockQ5_1, BlockQ8_1 => vec_dot_q5_1_q8_1, vec_dot_q5_1_q8_1_x4;
}

#[cfg(test)]
pub(super) mod k_quant_reference;

#[cfg(test)]
mod tests {
    use super::{
        k_quant_reference::{ALL_PATHS, UNPACKED_PATHS, check_against_scalar, check_interleaved},
        *,
    };
    use crate::kernels::cpu::{CpuFeatures, KernelTier};
    use crate::kernels::scalar;

    /// Whether this CPU runs the tier (saying so when it does not).
    fn runs() -> bool {
        let runs = CpuFeatures::get().supports(KernelTier::Avx2);
        if !runs {
            eprintln!("skipped: this CPU lacks AVX2, FMA or F16C");
        }
        runs
    }

    /// Checks a type's one-row and four-row kernels (see [`check_kernels`]), and that they give the
    /// scalar reference's bits; a K-quant's along each of llama.cpp's paths.
    macro_rules! check {
        ($name:literal, $one:ident, $four:ident) => {
            check_against_scalar(
                $name,
                // SAFETY: called only after `runs()`: the CPU has the tier's features.
                |x, y| unsafe { $one(x, y) },
                // SAFETY: as above.
                |rows, y| unsafe { $four(rows, y) },
                |x, y| scalar::$one(x, y),
            )
        };
        ($name:literal, $one:ident, $four:ident, $paths:expr) => {
            for path in $paths {
                check_against_scalar(
                    &format!("{} {path:?}", $name),
                    // SAFETY: called only after `runs()`: the CPU has the tier's features.
                    |x, y| unsafe { $one(x, y, path) },
                    // SAFETY: as above.
                    |rows, y| unsafe { $four(rows, y, path) },
                    |x, y| scalar::$one(x, y, path),
                );
            }
        };
    }

    #[test]
    fn q5_0_dots_match_the_exact_products() {
        if runs() {
            check!("Q5_0", vec_dot_q5_0_q8_0, vec_dot_q5_0_q8_0_x4);
        }
    }

    #[test]
    fn q5_1_dots_match_the_exact_products() {
        if runs() {
            check!("Q5_1", vec_dot_q5_1_q8_1, vec_dot_q5_1_q8_1_x4);
        }
    }

    #[test]
    fn q4_k_dots_match_the_exact_products() {
        if runs() {
            check!("Q4_K", vec_dot_q4_k_q8_k, vec_dot_q4_k_q8_k_x4, ALL_PATHS);
        }
    }

    #[test]
    fn q5_k_dots_match_the_exact_products() {
        if runs() {
            check!(
                "Q5_K",
                vec_dot_q5_k_q8_k,
                vec_dot_q5_k_q8_k_x4,
                UNPACKED_PATHS
            );
        }
    }

    #[test]
    fn q6_k_dots_match_the_exact_products() {
        if runs() {
            check!(
                "Q6_K",
                vec_dot_q6_k_q8_k,
                vec_dot_q6_k_q8_k_x4,
                UNPACKED_PATHS
            );
        }
    }

    /// The dots of sixteen interleaved Q4_K rows, along both repacked paths, give the scalar
    /// single-row dots' bits on the reference cases (random blocks, then the format's extremes).
    #[test]
    fn interleaved_q4_k_dots_match_the_scalar_dots_of_their_rows() {
        if !runs() {
            return;
        }
        for path in [KPath::RepackedGemv, KPath::RepackedGemm] {
            check_interleaved(
                &format!("Q4_K {path:?}"),
                // SAFETY: called only after `runs()`: the CPU has the tier's features.
                |w, y| unsafe { vec_dot_q4_k_x16_q8_k(w, y, path) },
                |x, y| scalar::vec_dot_q4_k_q8_k(x, y, path),
            );
        }
    }

    /// The dots of sixteen interleaved Q6_K rows give the scalar single-row dots' bits along
    /// ggml's `vec_dot` on the reference cases (random blocks, then the format's extremes).
    #[test]
    fn interleaved_q6_k_dots_match_the_scalar_dots_of_their_rows() {
        if !runs() {
            return;
        }
        check_interleaved(
            "Q6_K",
            // SAFETY: called only after `runs()`: the CPU has the tier's features.
            |w, y| unsafe { vec_dot_q6_k_x16_q8_k(w, y) },
            |x, y| scalar::vec_dot_q6_k_q8_k(x, y, KPath::VecDot),
        );
    }

    #[test]
    fn k4_scales_and_mins_unpack_as_ggml_packs_them() {
        // Sub-block j < 4: scale in the low 6 bits of byte j, min in byte j + 4. Sub-block j >= 4: low
        // nibbles in byte j + 4 (scale) and its high nibble (min), top bits from bytes j - 4 and j.
        let mut packed = [0u8; 12];
        packed[0] = 0b1100_0101; // scale 0 = 5; scale 4 gains 3 << 4
        packed[4] = 0b0100_0111; // min 0 = 7; min 4 gains 1 << 4
        packed[8] = 0x9a; // scale 4 low nibble 0xa, min 4 low nibble 9
        packed[3] = 63; // scale 3
        packed[11] = 0x21; // scale 7 low nibble 1, min 7 low nibble 2
        let (scales, mins) = scales_mins_k4(&packed);
        let (scales, mins) = (scales.to_le_bytes(), mins.to_le_bytes());
        assert_eq!(scales, [5, 0, 0, 63, 0xa | (3 << 4), 0, 0, 1]);
        assert_eq!(mins, [7, 0, 0, 0, 9 | (1 << 4), 0, 0, 2]);
    }
}
