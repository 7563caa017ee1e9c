//! AVX-512 kernels (tier [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512): AVX2, FMA, F16C and
//! AVX-512 F/BW/VL/VNNI).
//!
//! Results are bit-identical to the AVX2 tier for the quantized dots. Q4_0 and Q4_1 follow the same
//! ggml code (see `avx2.rs`): per block, eight exact int32 lane sums (bytes `4i..4i+4`) become f32 and
//! are FMA'd with the f32 product of the two f16 scales into one 8-lane accumulator, `hsum_float_8` at
//! the end, and so does Q8_0. What changes is how the integers are formed: `vpdpbusd` (u8 x i8, four products per lane) instead of
//! `vpmaddubsw` + `vpmaddwd`, with the signed side handled by an offset folded into the accumulator
//! input:
//! - Q4_1: nibbles are already unsigned: `dpbusd(0, q, y)`.
//! - Q4_0: `dpbusd(-8*sum(y), q, y) = sum((q-8)*y)`; the offset is computed once per activation block
//!   and shared by every row.
//! - Q8_0: ggml's sign trick, `dpbusd(0, |x|, sign(y, x))`, exact while activations avoid -128, as
//!   they do; its product of many tokens biases the activations to unsigned instead and corrects by
//!   `-128*sum(x)` per lane, a weight row per int32 lane (`q8_0_lanes`).
//! - Q5_0 and Q5_1: as Q4_0 (offset `-16*sum(y)`) and Q4_1, the fifth bits added by a masked byte add.
//! - K-quants: 64 values (two sub-blocks) per 512-bit vector, `vpmaddubsw` then `vpdpwssd` with the
//!   sub-block scales; adding the two halves at the end gives the AVX2 tier's eight int32 lanes
//!   exactly, and the float steps are its own.
//!
//! The f16 scales are read with one `vcvtph2ps` of the block's first 8 bytes. The float dots follow
//! ggml's AVX-512 code (`simd-mappings.h` `__AVX512F__` branch, which llama.cpp runs on this class of
//! CPU): four 16-lane accumulators over steps of 64 elements, `GGML_F32x16_REDUCE`, leftovers one at
//! a time (in f64 for f16).

#![cfg(target_arch = "x86_64")]
#![allow(unsafe_code)]

/// The tier's entry points of one tile module's generic `gemm`: per name, the single-row dot whose
/// bits every result has, and the weight and activation block types.
macro_rules! tiled_products {
    ($($name:ident: $dot:ident, $w:ty, $a:ty;)*) => {$(
        #[doc = concat!("[`super::", stringify!($dot), "`] of every row of `w` against every token ")]
        #[doc = "of `x` (`nb` blocks each), into `out` as `layout` places them, with the same bits."]
        ///
        /// # Safety
        /// The CPU must support the [`KernelTier::Avx512`](crate::kernels::cpu::KernelTier::Avx512)
        /// features.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(crate) unsafe fn $name(w: &[$w], x: &[$a], nb: usize, out: &mut [f32], layout: OutLayout) {
            gemm(w, x, nb, out, layout);
        }
    )*};
}

mod k_lanes;
mod q0_tiles;
mod q4_0_lanes;
mod q4_0_x16;
mod q4_k_x16;
mod q6_k_x16;
mod q8_0_lanes;
mod q8_0_x16;

pub(crate) use self::{
    k_lanes::{
        gemm_q4_k_q8_k, gemm_q4_k_q8_k_repacked, gemm_q4_k_x16_q8_k_repacked, gemm_q5_k_q8_k,
        gemm_q6_k_q8_k, gemm_q6_k_x16_q8_k,
    },
    q0_tiles::{gemm_q4_0_q8_0, gemm_q5_0_q8_0},
    q4_0_lanes::{gemm_q4_0_q8_0_repacked, gemm_q4_0_x16_q8_0_repacked},
    q4_0_x16::gemv_q4_0_x16_q8_0,
    q4_k_x16::vec_dot_q4_k_x16_q8_k,
    q6_k_x16::vec_dot_q6_k_x16_q8_k,
    q8_0_lanes::{gemm_q8_0_q8_0, gemm_q8_0_x16_q8_0},
    q8_0_x16::vec_dot_q8_0_x16_q8_0,
};

use std::{arch::x86_64::*, cell::RefCell};

use half::f16;

use super::k_numerics::{K4Block, KInts, KKind, KPath, KScales, KSum, on_path, path};
use super::{
    tiles::{OutLayout, gemm_by_row_dots, pack_token_tiles, store_tile, tile_rows},
    x86::{
        self, bytes_from_nibbles_32, common_len, cut, f16_to_f32, gemm_by_dots, head_f32,
        hsum_float_8, load_i8x32,
    },
};
use crate::quant::{
    BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, BlockQ8_1,
    BlockQ8K, QK, QK_K,
};

/// Elements per f32 vector.
const EPR: usize = 16;
/// Elements per step of the float dots (four accumulators).
const STEP: usize = 4 * EPR;

// ---------------------------------------------------------------------------------------------
// Loads and small helpers. Safe functions: they need the target features (callers have them), and
// every load reads from a reference at least as large as the load.

/// ggml `GGML_F32x16_REDUCE` over four accumulators, ending in `_mm512_reduce_add_ps` as GCC and
/// Clang expand it (halves, then quarters, then lanes `0+2`, `1+3`, then those two).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn reduce_f32x16(mut x: [__m512; 4]) -> f32 {
    x[0] = _mm512_add_ps(x[0], x[2]);
    x[1] = _mm512_add_ps(x[1], x[3]);
    x[0] = _mm512_add_ps(x[0], x[1]);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(x[0])));
    let t3 = _mm256_add_ps(_mm512_castps512_ps256(x[0]), hi);
    let t6 = _mm_add_ps(_mm256_castps256_ps128(t3), _mm256_extractf128_ps::<1>(t3));
    let t8 = _mm_add_ps(t6, _mm_movehl_ps(t6, t6));
    _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_movehdup_ps(t8))
}

// ---------------------------------------------------------------------------------------------
// Float dots.

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn load_f32x16(v: &[f32; EPR]) -> __m512 {
    // SAFETY: `v` is 16 readable f32; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_ps(v.as_ptr()) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn load_u32x16(v: &[u32; EPR]) -> __m512i {
    // SAFETY: `v` is 64 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn load_i32x16(v: &[i32; EPR]) -> __m512i {
    // SAFETY: as in `load_u32x16`.
    unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn load_f16x16(v: &[f16; EPR]) -> __m512 {
    // SAFETY: `v` is 16 readable f16 (32 bytes); `loadu` has no alignment requirement.
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(v.as_ptr().cast()) })
}

/// ggml `ggml_vec_dot_f32` (AVX-512): `sum(a[i] * b[i])` over the common length.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let np = n - n % STEP;
    let (a_steps, _) = a[..np].as_chunks::<STEP>();
    let (b_steps, _) = b[..np].as_chunks::<STEP>();
    let mut sum = [_mm512_setzero_ps(); 4];
    for (xs, ys) in a_steps.iter().zip(b_steps) {
        let (xv, _) = xs.as_chunks::<EPR>();
        let (yv, _) = ys.as_chunks::<EPR>();
        for j in 0..4 {
            sum[j] = _mm512_fmadd_ps(load_f32x16(&xv[j]), load_f32x16(&yv[j]), sum[j]);
        }
    }
    let mut sumf = reduce_f32x16(sum);
    for (x, y) in a[np..n].iter().zip(&b[np..n]) {
        sumf = x.mul_add(*y, sumf);
    }
    sumf
}

/// f16 dots of `R` rows against `y`, ggml `ggml_vec_dot_f16` (AVX-512, no FP16 arithmetic) per row.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_f16_rows<const R: usize>(rows: [&[f16]; R], y: &[f16]) -> [f32; R] {
    let n = common_len(&rows, y);
    let np = n - n % STEP;
    let (y_steps, _) = y[..np].as_chunks::<STEP>();
    let steps = rows.map(|r| r[..np].as_chunks::<STEP>().0);
    let mut sum = [[_mm512_setzero_ps(); 4]; R];
    for (i, ys) in y_steps.iter().enumerate() {
        let (yv, _) = ys.as_chunks::<EPR>();
        for j in 0..4 {
            let yj = load_f16x16(&yv[j]);
            for r in 0..R {
                let (xv, _) = steps[r][i].as_chunks::<EPR>();
                sum[r][j] = _mm512_fmadd_ps(load_f16x16(&xv[j]), yj, sum[r][j]);
            }
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        let mut sumf = f64::from(reduce_f32x16(sum[r]));
        for (x, yk) in rows[r][np..n].iter().zip(&y[np..n]) {
            sumf += f64::from(f16_to_f32(*x) * f16_to_f32(*yk));
        }
        out[r] = sumf as f32;
    }
    out
}

/// ggml `ggml_vec_dot_f16` (AVX-512): f16 inputs, f32 products and sums, leftovers in f64.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_f16(a: &[f16], b: &[f16]) -> f32 {
    dot_f16_rows([a], b)[0]
}

/// Four rows of [`vec_dot_f16`] sharing the activation loads and conversions (16 accumulators).
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_f16_x4(rows: [&[f16]; 4], y: &[f16]) -> [f32; 4] {
    dot_f16_rows(rows, y)
}

// ---------------------------------------------------------------------------------------------
// Quantized dots.

/// Q8_0 x Q8_0 dots of `R` rows against `y`, as ggml's x86 code takes them: per block, eight exact
/// int32 lanes (`vpdpbusd` of `|x|` and `y` signed by `x`, ggml's sign trick, exact while activations
/// avoid -128, as they do) fused with `d_x d_y` into one 8-lane sum; `hsum_float_8` at the end.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_q8_0_rows<const R: usize>(rows: [&[BlockQ8_0]; R], y: &[BlockQ8_0]) -> [f32; R] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let zero = _mm256_setzero_si256();
    let mut acc = [_mm256_setzero_ps(); R];
    for (i, b) in y[..n].iter().enumerate() {
        if R > 1 {
            x86::prefetch_rows_ahead(&rows, i);
        }
        let qy = load_i8x32(&b.qs);
        let dy = f16_to_f32(b.d);
        for r in 0..R {
            let a = &rows[r][i];
            let qx = load_i8x32(&a.qs);
            let lanes =
                _mm256_dpbusd_epi32(zero, _mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
            let d = _mm256_set1_ps(f16_to_f32(a.d) * dy);
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), acc[r]);
        }
    }
    acc.map(|a| hsum_float_8(a))
}

/// ggml `ggml_vec_dot_q8_0_q8_0`, with VNNI.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q8_0_q8_0(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    dot_q8_0_rows([x], y)[0]
}

/// Four rows of [`vec_dot_q8_0_q8_0`] sharing the activation loads.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q8_0_q8_0_x4(rows: [&[BlockQ8_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
    dot_q8_0_rows(rows, y)
}

/// `out[r] = ` [`vec_dot_q8_0_q8_0`]`(row r of w, y)` for the rows of `w` (rows of `y.len()` blocks,
/// one per entry of `out`), four rows at a time.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn gemv_q8_0_q8_0(w: &[BlockQ8_0], y: &[BlockQ8_0], out: &mut [f32]) {
    let nb = y.len();
    let row = |r: usize| &w[r * nb..(r + 1) * nb];
    let mut quads = out.chunks_exact_mut(4);
    let mut r = 0;
    for quad in quads.by_ref() {
        quad.copy_from_slice(&dot_q8_0_rows(
            [row(r), row(r + 1), row(r + 2), row(r + 3)],
            y,
        ));
        r += 4;
    }
    for o in quads.into_remainder() {
        *o = dot_q8_0_rows([row(r)], y)[0];
        r += 1;
    }
}

/// Q4_0 x Q8_0 dots of `R` rows against `y`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_q4_0_rows<const R: usize>(rows: [&[BlockQ4_0]; R], y: &[BlockQ8_0]) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    for_q4_0_blocks(rows, y, |r, d, lanes| {
        acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(d), _mm256_cvtepi32_ps(lanes), acc[r]);
    });
    acc.map(|a| hsum_float_8(a))
}

/// Calls `each(r, d, lanes)` for each block of each of `R` Q4_0 rows against `y`, in block order:
/// `d` holds `d_x d_y` in its first lane, `lanes` the block's exact products in eight int32 lanes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn for_q4_0_blocks<const R: usize>(
    rows: [&[BlockQ4_0]; R],
    y: &[BlockQ8_0],
    mut each: impl FnMut(usize, __m128, __m256i),
) {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let eight = _mm256_set1_epi8(8);
    let zero = _mm256_setzero_si256();
    for (i, b) in y[..n].iter().enumerate() {
        let hy = head_f32(b);
        let qy = load_i8x32(&b.qs);
        // -8 * sum(y) per lane: Q4_0 values are nibble - 8.
        let offset = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, eight, qy));
        for (r, row) in rows.iter().enumerate() {
            let a = &row[i];
            let qx = bytes_from_nibbles_32(&a.qs);
            each(
                r,
                _mm_mul_ss(head_f32(a), hy),
                _mm256_dpbusd_epi32(offset, qx, qy),
            );
        }
    }
}

/// Four Q4_0 rows against `y` along ggml's repacked GEMV and GEMM: per block, the exact totals of the
/// four rows reduced together and fused with `d_x d_y` into one sum a row per lane.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_q4_0_repacked_rows4(rows: [&[BlockQ4_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let eight = _mm256_set1_epi8(8);
    let zero = _mm256_setzero_si256();
    let mut acc = _mm_setzero_ps();
    for (i, b) in y[..n].iter().enumerate() {
        x86::prefetch_rows_ahead(&rows, i);
        let qy = load_i8x32(&b.qs);
        // -8 * sum(y) per lane: Q4_0 values are nibble - 8.
        let offset = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, eight, qy));
        let lanes =
            rows.map(|row| _mm256_dpbusd_epi32(offset, bytes_from_nibbles_32(&row[i].qs), qy));
        let d = rows.map(|row| row[i].d.to_bits() as i16);
        let d_x = _mm_cvtph_ps(_mm_setr_epi16(d[0], d[1], d[2], d[3], 0, 0, 0, 0));
        let d_xy = _mm_mul_ps(d_x, _mm_set1_ps(f16_to_f32(b.d)));
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(x86::totals_of_four_x8(lanes)), d_xy, acc);
    }
    let mut out = [0f32; 4];
    // SAFETY: `out` has room for 4 f32; unaligned store.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
    out
}

/// ggml's repacked Q4_0 GEMV and GEMM, with VNNI: per block, the exact integer dot fused with
/// `d_x d_y` into one sum.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q4_0_q8_0_repacked(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    let mut sum = 0f32;
    for_q4_0_blocks([x], y, |_, d, lanes| {
        sum = (x86::total_i32x8(lanes) as f32).mul_add(_mm_cvtss_f32(d), sum);
    });
    sum
}

/// Four rows of [`vec_dot_q4_0_q8_0_repacked`].
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q4_0_q8_0_repacked_x4(
    rows: [&[BlockQ4_0]; 4],
    y: &[BlockQ8_0],
) -> [f32; 4] {
    dot_q4_0_repacked_rows4(rows, y)
}

/// ggml `ggml_vec_dot_q4_0_q8_0`, with VNNI.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    dot_q4_0_rows([x], y)[0]
}

/// Four rows of [`vec_dot_q4_0_q8_0`] sharing the activation loads and offsets.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q4_0_q8_0_x4(rows: [&[BlockQ4_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
    dot_q4_0_rows(rows, y)
}

/// Q4_1 x Q8_1 dots of `R` rows against `y`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_q4_1_rows<const R: usize>(rows: [&[BlockQ4_1]; R], y: &[BlockQ8_1]) -> [f32; R] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let zero = _mm256_setzero_si256();
    let mut acc = [_mm256_setzero_ps(); R];
    // Lane 1 of each holds the row's running `sum(m_x * s_y)`; the other lanes are ignored.
    let mut summs = [_mm_setzero_ps(); R];
    for (i, b) in y[..n].iter().enumerate() {
        if R > 1 {
            x86::prefetch_rows_ahead(&rows, i);
        }
        let hy = head_f32(b); // [d_y, s_y, _, _]
        let s_only = _mm_blend_ps::<0b0010>(_mm_setzero_ps(), hy); // [0, s_y, 0, 0]
        let qy = load_i8x32(&b.qs);
        for r in 0..R {
            let a = &rows[r][i];
            let hx = head_f32(a); // [d_x, m_x, _, _]
            // Lane 1: fma(m_x, s_y, summs), as ggml's scalar `summs += m * s` compiles.
            summs[r] = _mm_fmadd_ps(hx, s_only, summs[r]);
            let d = _mm256_broadcastss_ps(_mm_mul_ss(hx, hy));
            let qx = bytes_from_nibbles_32(&a.qs);
            let q = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(zero, qx, qy));
            acc[r] = _mm256_fmadd_ps(d, q, acc[r]);
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum_float_8(acc[r]) + _mm_cvtss_f32(_mm_movehdup_ps(summs[r]));
    }
    out
}

/// ggml `ggml_vec_dot_q4_1_q8_1`, with VNNI.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q4_1_q8_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    dot_q4_1_rows([x], y)[0]
}

/// Four rows of [`vec_dot_q4_1_q8_1`] sharing the activation loads.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q4_1_q8_1_x4(rows: [&[BlockQ4_1]; 4], y: &[BlockQ8_1]) -> [f32; 4] {
    dot_q4_1_rows(rows, y)
}

// ---------------------------------------------------------------------------------------------
// 5-bit and K-quant dots.

/// The 32 values of a 5-bit block, 0..=31, in element order: the nibbles, plus 16 where the fifth bit
/// (element `j` in bit `j` of `qh`) is set.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn five_bit_values(qs: &[u8; QK / 2], qh: [u8; 4]) -> __m256i {
    let q = bytes_from_nibbles_32(qs);
    _mm256_mask_add_epi8(q, u32::from_le_bytes(qh), q, _mm256_set1_epi8(0x10))
}

/// Q5_0 x Q8_0 dots of `R` rows against `y`: `dpbusd(-16*sum(y), q, y) = sum((q-16)*y)`, the
/// offset shared by every row.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_q5_0_rows<const R: usize>(rows: [&[BlockQ5_0]; R], y: &[BlockQ8_0]) -> [f32; R] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let sixteen = _mm256_set1_epi8(16);
    let zero = _mm256_setzero_si256();
    let mut acc = [_mm256_setzero_ps(); R];
    for (i, b) in y[..n].iter().enumerate() {
        if R > 1 {
            x86::prefetch_rows_ahead(&rows, i);
        }
        let hy = head_f32(b);
        let qy = load_i8x32(&b.qs);
        let offset = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, sixteen, qy));
        for r in 0..R {
            let a = &rows[r][i];
            let d = _mm256_broadcastss_ps(_mm_mul_ss(head_f32(a), hy));
            let qx = five_bit_values(&a.qs, a.qh);
            let q = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(offset, qx, qy));
            acc[r] = _mm256_fmadd_ps(d, q, acc[r]);
        }
    }
    acc.map(|a| hsum_float_8(a))
}

/// ggml `ggml_vec_dot_q5_0_q8_0`, with VNNI.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q5_0_q8_0(x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
    dot_q5_0_rows([x], y)[0]
}

/// Four rows of [`vec_dot_q5_0_q8_0`] sharing the activation loads and offsets.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q5_0_q8_0_x4(rows: [&[BlockQ5_0]; 4], y: &[BlockQ8_0]) -> [f32; 4] {
    dot_q5_0_rows(rows, y)
}

/// Q5_1 x Q8_1 dots of `R` rows against `y`: as Q4_1 with the fifth bits added to the nibbles.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_q5_1_rows<const R: usize>(rows: [&[BlockQ5_1]; R], y: &[BlockQ8_1]) -> [f32; R] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let zero = _mm256_setzero_si256();
    let mut acc = [_mm256_setzero_ps(); R];
    // Lane 1 of each holds the row's running `sum(m_x * s_y)`; the other lanes are ignored.
    let mut summs = [_mm_setzero_ps(); R];
    for (i, b) in y[..n].iter().enumerate() {
        if R > 1 {
            x86::prefetch_rows_ahead(&rows, i);
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
            let q = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(zero, qx, qy));
            acc[r] = _mm256_fmadd_ps(d, q, acc[r]);
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum_float_8(acc[r]) + _mm_cvtss_f32(_mm_movehdup_ps(summs[r]));
    }
    out
}

/// ggml `ggml_vec_dot_q5_1_q8_1`, with VNNI.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q5_1_q8_1(x: &[BlockQ5_1], y: &[BlockQ8_1]) -> f32 {
    dot_q5_1_rows([x], y)[0]
}

/// Four rows of [`vec_dot_q5_1_q8_1`] sharing the activation loads.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q5_1_q8_1_x4(rows: [&[BlockQ5_1]; 4], y: &[BlockQ8_1]) -> [f32; 4] {
    dot_q5_1_rows(rows, y)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn load_i8x64(v: &[i8; 64]) -> __m512i {
    // SAFETY: `v` is 64 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn load_u8x64(v: &[u8; 64]) -> __m512i {
    // SAFETY: `v` is 64 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
}

/// 32 bytes in both 256-bit halves.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn broadcast_u8x32(v: &[u8; 32]) -> __m512i {
    // SAFETY: `v` is 32 readable bytes; `loadu` has no alignment requirement.
    _mm512_broadcast_i64x4(unsafe { _mm256_loadu_si256(v.as_ptr().cast()) })
}

/// `v` with i16 number `picks[k]` of each 128-bit lane in every i16 of lane `k`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn spread_i16(v: __m512i, picks: [i32; 4]) -> __m512i {
    let index = |k: i32| {
        let bytes = (2 * k) | ((2 * k + 1) << 8);
        bytes | (bytes << 16)
    };
    let [a, b, c, d] = picks.map(index);
    _mm512_shuffle_epi8(
        v,
        _mm512_setr_epi32(a, a, a, a, b, b, b, b, c, c, c, c, d, d, d, d),
    )
}

/// The 16 int32 lanes of a 512-bit sum folded to ggml's 8: lane `l` plus lane `l + 8`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn fold_halves(v: __m512i) -> __m256i {
    _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
}

/// Calls `each(j, values)` for each 64 values `j` of a Q4_K/Q5_K super-block, as unsigned bytes: low
/// nibbles in the low half, high nibbles in the high half, Q5_K's fifth bits `qh` added.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn for_k4_values(
    qs: &[u8; QK_K / 2],
    qh: Option<&[u8; QK_K / 8]>,
    mut each: impl FnMut(usize, __m512i),
) {
    let low4 = _mm512_set1_epi8(0x0f);
    let sixteen = _mm512_set1_epi8(0x10);
    let nibble_shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    let (q4, _) = qs.as_chunks::<32>();
    let high = match qh {
        Some(h) => broadcast_u8x32(h),
        None => _mm512_setzero_si512(),
    };
    // The fifth bits of sub-blocks 2j (low half) and 2j + 1 (high half).
    let mut bit = _mm512_inserti64x4::<1>(_mm512_set1_epi8(1), _mm256_set1_epi8(2));
    for (j, q4) in q4.iter().enumerate() {
        let bits = _mm512_srlv_epi64(broadcast_u8x32(q4), nibble_shift);
        let mut q = _mm512_and_si512(bits, low4);
        if qh.is_some() {
            q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(high, bit), q, sixteen);
            bit = _mm512_slli_epi16::<2>(bit);
        }
        each(j, q);
    }
}

/// Calls `each(j, p, scaled)` for each 64 values `j` of a Q4_K/Q5_K super-block: `p` the i16 pair
/// products of its values ([`for_k4_values`]) with the activations `q8`, `scaled` their sub-blocks'
/// scales from the eight i16 `scales`, for `vpdpwssd`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn for_k4_products(
    qs: &[u8; QK_K / 2],
    qh: Option<&[u8; QK_K / 8]>,
    scales: __m128i,
    q8: &[i8; QK_K],
    mut each: impl FnMut(usize, __m512i, __m512i),
) {
    let scales = _mm512_broadcast_i32x4(scales);
    let (q8, _) = q8.as_chunks::<64>();
    for_k4_values(qs, qh, |j, q| {
        let p = _mm512_maddubs_epi16(q, load_i8x64(&q8[j]));
        let s = 2 * j as i32;
        each(j, p, spread_i16(scales, [s, s, s + 1, s + 1]));
    });
}

/// A Q4_K/Q5_K super-block's scaled sums `S1` spread over 16 int32 lanes (their total is `S1`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn k4_scaled_sums(
    qs: &[u8; QK_K / 2],
    qh: Option<&[u8; QK_K / 8]>,
    scales: __m128i,
    q8: &[i8; QK_K],
) -> __m512i {
    let mut sumi = _mm512_setzero_si512();
    for_k4_products(qs, qh, scales, q8, |_, p, scaled| {
        sumi = _mm512_dpwssd_epi32(sumi, p, scaled);
    });
    sumi
}

/// The integers of a Q4_K/Q5_K super-block's dot ([`KInts`]) along path `P`: the repacked GEMM's
/// pair per 64 values, or the scaled sums ([`k4_scaled_sums`]) with their halves added (the AVX2
/// tier's lanes) or totalled. `scales` holds the eight sub-block scales as i16; `qh`, for Q5_K, the
/// fifth bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn k4_ints<const P: u8>(
    qs: &[u8; QK_K / 2],
    qh: Option<&[u8; QK_K / 8]>,
    scales: __m128i,
    q8: &[i8; QK_K],
) -> KInts {
    const { assert!(P <= path::REPACKED_GEMM) };
    let mut ints = KInts::default();
    if P == path::REPACKED_GEMM {
        for_k4_products(qs, qh, scales, q8, |j, p, scaled| {
            let pair = _mm512_dpwssd_epi32(_mm512_setzero_si512(), p, scaled);
            ints.pairs[j] = _mm512_reduce_add_epi32(pair);
        });
        return ints;
    }
    let sumi = k4_scaled_sums(qs, qh, scales, q8);
    if P == path::VEC_DOT {
        ints.lanes = x86::store_i32x8(fold_halves(sumi));
    } else {
        // The paths that take only the total.
        ints.lanes[0] = _mm512_reduce_add_epi32(sumi);
    }
    ints
}

/// Q4_K/Q5_K x Q8_K dots of `R` rows against `y` along `path`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
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
            x86::prefetch_blocks_ahead(&rows, i);
        }
        let sub_sums = x86::sub_block_sums(b);
        for r in 0..R {
            let a = &rows[r][i];
            let (scales, mins) = x86::scales_mins_k4(a.packed_scales());
            let scales = x86::u8x8_to_i16(scales);
            let mut ints = k4_ints::<P>(a.qs(), a.qh(), scales, &b.qs);
            ints.mins = x86::k4_min_ints::<P>(x86::k4_min_products(mins, sub_sums));
            sums[r].add(&ints, x86::k4_block_scales(a, b.d));
        }
    }
    sums.map(KSum::finish)
}

/// ggml's Q4_K x Q8_K dot along `path`, on 512-bit vectors.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q4_k_q8_k(x: &[BlockQ4K], y: &[BlockQ8K], path: KPath) -> f32 {
    on_path!(path, P => dot_k4_rows::<_, 1, P>([x], y)[0])
}

/// Four rows of [`vec_dot_q4_k_q8_k`] sharing the activation sums, the rows ahead prefetched.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q4_k_q8_k_x4(
    rows: [&[BlockQ4K]; 4],
    y: &[BlockQ8K],
    path: KPath,
) -> [f32; 4] {
    if path == KPath::RepackedGemv {
        return gemv_q4_k_rows4(rows, y);
    }
    on_path!(path, P => dot_k4_rows::<_, 4, P>(rows, y))
}

/// Four Q4_K rows against `y` along llama.cpp's repacked GEMV, each super-block's integer totals
/// `S1` and `S2` of the four rows reduced together into the lanes of one vector, so that the float
/// steps (`acc = fma(S1, d dy, acc)`, `acc_m = fma(S2, dmin dy, acc_m)`, `acc - acc_m`) run a row
/// per lane.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn gemv_q4_k_rows4(rows: [&[BlockQ4K]; 4], y: &[BlockQ8K]) -> [f32; 4] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let mut acc = _mm_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for (i, b) in y[..n].iter().enumerate() {
        x86::prefetch_blocks_ahead(&rows, i);
        let sub_sums = x86::sub_block_sums(b);
        let mut s1 = [_mm512_setzero_si512(); 4];
        let mut s2 = [_mm_setzero_si128(); 4];
        for ((s1, s2), row) in s1.iter_mut().zip(&mut s2).zip(&rows) {
            let a = &row[i];
            let (scales, mins) = x86::scales_mins_k4(&a.scales);
            *s1 = k4_scaled_sums(&a.qs, None, x86::u8x8_to_i16(scales), &b.qs);
            *s2 = x86::k4_min_products(mins, sub_sums);
        }
        let halves = _mm_setr_epi16(
            rows[0][i].d.to_bits() as i16,
            rows[1][i].d.to_bits() as i16,
            rows[2][i].d.to_bits() as i16,
            rows[3][i].d.to_bits() as i16,
            rows[0][i].dmin.to_bits() as i16,
            rows[1][i].dmin.to_bits() as i16,
            rows[2][i].dmin.to_bits() as i16,
            rows[3][i].dmin.to_bits() as i16,
        );
        let scales = _mm256_mul_ps(_mm256_cvtph_ps(halves), _mm256_set1_ps(b.d));
        let (d_dy, dmin_dy) = (
            _mm256_castps256_ps128(scales),
            _mm256_extractf128_ps::<1>(scales),
        );
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(totals_of_four(s1)), d_dy, acc);
        acc_m = _mm_fmadd_ps(_mm_cvtepi32_ps(totals_of_four_x4(s2)), dmin_dy, acc_m);
    }
    let mut out = [0f32; 4];
    // SAFETY: `out` has room for 4 f32; unaligned store.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), _mm_sub_ps(acc, acc_m)) };
    out
}

/// Lane `r`: the exact sum of the 16 lanes of `v[r]`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn totals_of_four(v: [__m512i; 4]) -> __m128i {
    let pair = |a: __m512i, b: __m512i| {
        _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b))
    };
    let (ab, cd) = (pair(v[0], v[1]), pair(v[2], v[3]));
    // Per 128-bit quarter: the quarter's sums of v[0], v[1], v[2], v[3].
    let quarters = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
    let halves = _mm256_add_epi32(
        _mm512_castsi512_si256(quarters),
        _mm512_extracti64x4_epi64::<1>(quarters),
    );
    _mm_add_epi32(
        _mm256_castsi256_si128(halves),
        _mm256_extracti128_si256::<1>(halves),
    )
}

/// Lane `r`: the exact sum of the 4 lanes of `v[r]`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn totals_of_four_x4(v: [__m128i; 4]) -> __m128i {
    let pair =
        |a: __m128i, b: __m128i| _mm_add_epi32(_mm_unpacklo_epi32(a, b), _mm_unpackhi_epi32(a, b));
    let (ab, cd) = (pair(v[0], v[1]), pair(v[2], v[3]));
    _mm_add_epi32(_mm_unpacklo_epi64(ab, cd), _mm_unpackhi_epi64(ab, cd))
}

/// ggml's Q5_K x Q8_K dot along `path`, on 512-bit vectors.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q5_k_q8_k(x: &[BlockQ5K], y: &[BlockQ8K], path: KPath) -> f32 {
    on_path!(path, P => dot_k4_rows::<_, 1, P>([x], y)[0])
}

/// Four rows of [`vec_dot_q5_k_q8_k`] sharing the activation sums, the rows ahead prefetched.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q5_k_q8_k_x4(
    rows: [&[BlockQ5K]; 4],
    y: &[BlockQ8K],
    path: KPath,
) -> [f32; 4] {
    on_path!(path, P => dot_k4_rows::<_, 4, P>(rows, y))
}

/// Values `128j..128j + 64` and `128j + 64..128j + 128` of a Q6_K block as unsigned 6-bit bytes: the
/// low and high nibbles of `ql`, each with its 2-bit pairs of `qh`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q6_k_values_128(x: &BlockQ6K, j: usize) -> [__m512i; 2] {
    /// `(a & b) | c` for `vpternlogd`.
    const A_AND_B_OR_C: i32 = 0xea;
    let low4 = _mm512_set1_epi8(0x0f);
    let high2 = _mm512_set1_epi8(0x30);
    // Brings bits 0-1 (low half) and 2-3 (high half) of each byte to bits 4-5 ...
    let first_pairs = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4);
    // ... and bits 4-5 (low half) and 6-7 (high half).
    let second_pairs = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
    let (ql, _) = x.ql.as_chunks::<64>();
    let (qh, _) = x.qh.as_chunks::<32>();
    let (l, h) = (load_u8x64(&ql[j]), broadcast_u8x32(&qh[j]));
    let h_first = _mm512_and_si512(_mm512_sllv_epi64(h, first_pairs), high2);
    let h_second = _mm512_and_si512(_mm512_srlv_epi64(h, second_pairs), high2);
    [
        _mm512_ternarylogic_epi32::<A_AND_B_OR_C>(l, low4, h_first),
        _mm512_ternarylogic_epi32::<A_AND_B_OR_C>(_mm512_srli_epi16::<4>(l), low4, h_second),
    ]
}

/// The int32 lanes of a Q6_K super-block's scaled sums of its unsigned 6-bit values, equal to the
/// AVX2 tier's: each 128 values as two 512-bit vectors (values 0..64 from the low nibbles, 64..128
/// from the high ones, each with its 2-bit pairs of `qh`), scaled and added by `vpdpwssd`; the halves
/// are added at the end.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q6_k_scaled_sums(x: &BlockQ6K, q8: &[i8; QK_K]) -> __m256i {
    let (scales, _) = x.scales.as_chunks::<8>();
    let (q8, _) = q8.as_chunks::<64>();
    let mut sumi = _mm512_setzero_si512();
    for (j, scales) in scales.iter().enumerate() {
        let sc = _mm512_broadcast_i32x4(x86::scales_i16(scales));
        let [first, second] = q6_k_values_128(x, j);
        let p = _mm512_maddubs_epi16(first, load_i8x64(&q8[2 * j]));
        sumi = _mm512_dpwssd_epi32(sumi, p, spread_i16(sc, [0, 1, 2, 3]));
        let p = _mm512_maddubs_epi16(second, load_i8x64(&q8[2 * j + 1]));
        sumi = _mm512_dpwssd_epi32(sumi, p, spread_i16(sc, [4, 5, 6, 7]));
    }
    fold_halves(sumi)
}

/// Q6_K x Q8_K dots of `R` rows against `y` along `path`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_q6_k_rows<const R: usize, const P: u8>(rows: [&[BlockQ6K]; R], y: &[BlockQ8K]) -> [f32; R] {
    let n = common_len(&rows, y);
    let rows = cut(rows, n);
    let mut sums = [KSum::<P>::new(KKind::Q6K); R];
    for (i, b) in y[..n].iter().enumerate() {
        if R > 1 {
            x86::prefetch_blocks_ahead(&rows, i);
        }
        let bsums = x86::load_i16x16(&b.bsums);
        for r in 0..R {
            let a = &rows[r][i];
            let sumi = _mm256_sub_epi32(q6_k_scaled_sums(a, &b.qs), x86::q6_k_offset(a, bsums));
            let mut ints = KInts::default();
            if P == path::VEC_DOT {
                ints.lanes = x86::store_i32x8(sumi);
            } else {
                ints.lanes[0] = x86::store_i32x8(sumi).iter().sum();
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

/// ggml's Q6_K x Q8_K dot along `path`, on 512-bit vectors.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q6_k_q8_k(x: &[BlockQ6K], y: &[BlockQ8K], path: KPath) -> f32 {
    on_path!(path, P => dot_q6_k_rows::<1, P>([x], y)[0])
}

/// Four rows of [`vec_dot_q6_k_q8_k`] sharing the activation loads, the rows ahead prefetched.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q6_k_q8_k_x4(
    rows: [&[BlockQ6K]; 4],
    y: &[BlockQ8K],
    path: KPath,
) -> [f32; 4] {
    on_path!(path, P => dot_q6_k_rows::<4, P>(rows, y))
}

// ---------------------------------------------------------------------------------------------
// Tiled products (prefill): Q4_1 in register tiles of `TILE_ROWS` weight rows by `TILE_TOKENS` tokens
// (below), Q4_0 and Q5_0 in `q0_tiles`, Q8_0 in `q8_0_lanes` and the K-quants in `k_lanes` (a row
// per lane).
//
// Every (row, token) of a tile keeps its own 8-lane accumulator and goes through exactly the per-block
// operations of the single-row dots above, so every result has the single-row call's bits. The scale
// product `d_x * d_y` is the same f32 product in whatever lane it is formed, so one 16-lane multiply
// forms all of a tile's products, and the accumulating FMAs broadcast them from memory. Each call
// first unpacks its tokens, `TILE_TOKENS` at a time, into [`TokensQ8_1`] (f32 scales), once per token
// rather than once per row tile; the last tile of tokens is padded with zero tokens, whose results are
// dropped.

/// Weight rows per register tile.
const TILE_ROWS: usize = 4;
/// Tokens per register tile.
const TILE_TOKENS: usize = 4;
/// Scale products per tile: lane `r * TILE_TOKENS + t` for row `r` and token `t`.
const TILE: usize = TILE_ROWS * TILE_TOKENS;
const _: () = assert!(
    TILE == 16,
    "a tile's scale products fill one 16-lane vector"
);

/// One block of `TILE_TOKENS` tokens' Q8_1 activations, as the Q4_1 tile kernel reads it.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct TokensQ8_1 {
    qs: [[i8; QK]; TILE_TOKENS],
    d: [f32; TILE_TOKENS],
    s: [f32; TILE_TOKENS],
}

/// One f16 field of one block of a row tile's rows, as f32 and laid out like the tile's scale
/// products: lane `r * TILE_TOKENS + t` holds row `r`'s value for every token `t`.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
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

impl PackedTokens for TokensQ8_1 {
    fn d(&self) -> &[f32; TILE_TOKENS] {
        &self.d
    }
}

/// Unpacks `x` (tokens of `nb` blocks) into `out`, `nb` entries per tile of tokens.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack_q8_1(x: &[BlockQ8_1], nb: usize, out: &mut Vec<TokensQ8_1>) {
    pack_token_tiles::<TILE_TOKENS, _, _>((x, nb), out, |p, lane, b| {
        p.qs[lane] = b.qs;
        p.d[lane] = f16_to_f32(b.d);
        p.s[lane] = f16_to_f32(b.s);
    });
}

/// `field` of every block of `rows`, as [`RowScales`], into `out`: per block, the rows' four f16
/// values widened together and each spread over its row's token lanes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn row_scales<W>(rows: &[&[W]; TILE_ROWS], field: impl Fn(&W) -> f16, out: &mut Vec<RowScales>) {
    const { assert!(TILE_ROWS == 4 && TILE_TOKENS == 4) };
    let nb = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    let spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    out.clear();
    out.resize(nb, RowScales::default());
    // A plain loop: a closure here would be called per block rather than inlined.
    for (i, scales) in out.iter_mut().enumerate() {
        let bits = |r: usize| field(&rows[r][i]).to_bits() as i16;
        let (a, b, c, d) = (bits(0), bits(1), bits(2), bits(3));
        let four = _mm_cvtph_ps(_mm_set_epi16(0, 0, 0, 0, d, c, b, a));
        let lanes = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(four));
        // SAFETY: `scales.0` is 16 f32; unaligned store.
        unsafe { _mm512_storeu_ps(scales.0.as_mut_ptr(), lanes) };
    }
}

/// Every scale product of a tile, block by block, into `out`: lane `k` of block `i` is
/// `rows[i][k] * token_d(i)[k % TILE_TOKENS]`. Formed in a pass of their own, so that the tile kernel
/// reads them from memory (broadcast loads) rather than shuffling them out of registers.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn scale_products<'a>(
    rows: &[RowScales],
    token_d: impl Iterator<Item = &'a [f32; TILE_TOKENS]>,
    out: &mut Vec<RowScales>,
) {
    out.clear();
    out.resize(rows.len(), RowScales::default());
    for ((dx, dy), d) in rows.iter().zip(token_d).zip(out.iter_mut()) {
        // SAFETY: `dx` and `d` are 16 f32, `dy` 4 f32; unaligned accesses.
        unsafe {
            let dy = _mm512_broadcast_f32x4(_mm_loadu_ps(dy.as_ptr()));
            let dx = _mm512_loadu_ps(dx.0.as_ptr());
            _mm512_storeu_ps(d.0.as_mut_ptr(), _mm512_mul_ps(dx, dy));
        }
    }
}

/// Q4_1 x Q8_1 dots of `R` rows against one tile of tokens (`nb` entries). The tile's sums
/// `m_x * s_y` share one 16-lane vector laid out like its scale products: per block, the same fused
/// multiply-add as the single-row dot's lane 1.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
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
    let zero = _mm256_setzero_si256();
    let mut acc = [[_mm256_setzero_ps(); TILE_TOKENS]; R];
    let mut summs = _mm512_setzero_ps();
    for i in 0..n {
        let (p, d) = (&tokens[i], &products[i].0);
        // SAFETY: `row_m[i]` is 16 f32 and `p.s` 4 f32; unaligned loads.
        let (m, s) = unsafe {
            (
                _mm512_loadu_ps(row_m[i].0.as_ptr()),
                _mm512_broadcast_f32x4(_mm_loadu_ps(p.s.as_ptr())),
            )
        };
        summs = _mm512_fmadd_ps(m, s, summs);
        for r in 0..R {
            let qx = bytes_from_nibbles_32(&rows[r][i].qs);
            for t in 0..TILE_TOKENS {
                let q = _mm256_dpbusd_epi32(zero, qx, load_i8x32(&p.qs[t]));
                let dk = _mm256_set1_ps(d[r * TILE_TOKENS + t]);
                acc[r][t] = _mm256_fmadd_ps(dk, _mm256_cvtepi32_ps(q), acc[r][t]);
            }
        }
    }
    let mut sums = [0f32; TILE];
    // SAFETY: `sums` has room for 16 f32; unaligned store.
    unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), summs) };
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
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
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

/// [`vec_dot_q4_1_q8_1`] of every row of `w` against every token of `x`, as [`gemm_q8_0_q8_0`].
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](super::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
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

// The tiled form of Q5_1: this tier's single-row and four-row dots over every row and token.
gemm_by_dots! {
    gemm_q5_1_q8_1: BlockQ5_1, BlockQ8_1 => vec_dot_q5_1_q8_1, vec_dot_q5_1_q8_1_x4;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{
        avx2::{
            self,
            k_quant_reference::{
                ALL_PATHS, UNPACKED_PATHS, cases, check_against_scalar, check_interleaved,
                check_kernels, check_same_bits,
            },
        },
        cpu::{CpuFeatures, KernelTier},
        scalar,
    };

    /// Whether this CPU runs the tier (saying so when it does not).
    fn runs() -> bool {
        let runs = CpuFeatures::get().supports(KernelTier::Avx512);
        if !runs {
            eprintln!("skipped: this CPU lacks the AVX-512 tier's features");
        }
        runs
    }

    /// Checks a type's one-row and four-row kernels (see [`check_kernels`]), and that the one-row
    /// kernel gives the AVX2 tier's bits.
    macro_rules! check {
        ($name:literal, $one:ident, $four:ident) => {{
            check_kernels(
                $name,
                // SAFETY: called only after `runs()`: the CPU has the tier's features.
                |x, y| unsafe { $one(x, y) },
                // SAFETY: as above.
                |rows, y| unsafe { $four(rows, y) },
            );
            check_same_bits(
                $name,
                // SAFETY: as above; the tier includes AVX2, FMA and F16C.
                |x, y| unsafe { avx2::$one(x, y) },
                // SAFETY: as above.
                |x, y| unsafe { $one(x, y) },
            );
            check_same_bits(
                $name,
                // SAFETY: as above.
                |x, y| unsafe { $one(x, y) },
                |x, y| scalar::$one(x, y),
            );
        }};
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
    fn q5_0_dots_match_the_exact_products_and_avx2() {
        if runs() {
            check!("Q5_0", vec_dot_q5_0_q8_0, vec_dot_q5_0_q8_0_x4);
        }
    }

    #[test]
    fn q5_1_dots_match_the_exact_products_and_avx2() {
        if runs() {
            check!("Q5_1", vec_dot_q5_1_q8_1, vec_dot_q5_1_q8_1_x4);
        }
    }

    #[test]
    fn q4_k_dots_match_the_exact_products_and_avx2() {
        if runs() {
            check!("Q4_K", vec_dot_q4_k_q8_k, vec_dot_q4_k_q8_k_x4, ALL_PATHS);
        }
    }

    #[test]
    fn q5_k_dots_match_the_exact_products_and_avx2() {
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
    fn q6_k_dots_match_the_exact_products_and_avx2() {
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

    /// The dots of sixteen interleaved Q8_0 rows give the scalar single-row dots' bits on the
    /// reference cases (random blocks, then the format's extremes).
    #[test]
    fn interleaved_q8_0_dots_match_the_scalar_dots_of_their_rows() {
        if !runs() {
            return;
        }
        check_interleaved(
            "Q8_0",
            // SAFETY: called only after `runs()`: the CPU has the tier's features.
            |w, y| unsafe { vec_dot_q8_0_x16_q8_0(w, y) },
            scalar::vec_dot_q8_0_q8_0,
        );
    }

    /// The decode product of interleaved Q4_0 rows gives the scalar repacked dots' bits on the
    /// reference cases (random blocks, then the format's extremes), for a whole group and a part
    /// of one.
    #[test]
    fn interleaved_q4_0_rows_match_the_scalar_repacked_dots() {
        if !runs() {
            return;
        }
        for (rows, y) in cases::<BlockQ4_0, { crate::quant::INTERLEAVED_ROWS }>() {
            let nb = y.len();
            let mut group = Vec::new();
            crate::quant::interleave(&rows.concat(), nb, &mut group);
            let want = rows
                .each_ref()
                .map(|x| scalar::vec_dot_q4_0_q8_0_repacked(x, &y));
            for n in [16, 5] {
                let mut got = vec![0f32; n];
                // SAFETY: called only after `runs()`: the CPU has the tier's features.
                unsafe { gemv_q4_0_x16_q8_0(&group, &y, &mut got) };
                let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                let want: Vec<u32> = want[..n].iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{nb} blocks, {n} rows");
            }
        }
    }
}
