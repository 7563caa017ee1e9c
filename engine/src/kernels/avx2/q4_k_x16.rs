//! Q4_K dots of sixteen rows held interleaved ([`BlockQ4Kx16`]) on the AVX2 tier: each half of a
//! group, eight rows, a row per int32 lane.
//!
//! A 64-byte word row of the interleaved nibbles is two vectors: rows 0-7, then rows 8-15, four bytes
//! of a row to a lane. `vpmaddubsw` against four activations broadcast to every lane gives each row
//! two i16 sums of two products; the eight words of a 32-value sub-block add up in i16 (at most
//! `8 * 2 * 15 * 128`), and one `vpmaddwd` by the sub-block's scale, both i16 of a lane holding it,
//! makes them the row's scaled int32 sum. No unpacking, no shuffles of the values and no reduction
//! across lanes, where the file's layout spends most of a row's instructions. The minimums times the
//! activation sums are four `vpmaddwd` of i16 pairs, and the float steps are those of llama.cpp's
//! repacked Q4_K kernels, a row per lane, so every result has the bits of the single-row dot along
//! the same path.

use std::arch::x86_64::*;

use crate::{
    kernels::{
        k_numerics::KPath,
        x86::{self, prefetch_in_order, quad},
    },
    quant::{BlockQ4Kx16, BlockQ8K, INTERLEAVED_ROWS, QK_K},
};

/// Sub-blocks (of 32 values, one scale and one minimum each) per super-block.
const SUB_BLOCKS: usize = QK_K / 32;
/// Rows per vector: half of a group.
const HALF: usize = INTERLEAVED_ROWS / 2;

/// Super-blocks ahead of the one being read whose lines the dot asks for: a group's super-blocks
/// are one stream of 2304 bytes each.
const PREFETCH_BLOCKS: usize = 2;

/// An entry of [`pick_bytes`]'s picks that makes a zero byte.
pub(super) const ZERO_BYTE: u8 = 0x80;

/// Half `h` of a 64-byte word row: the words of rows `8h..8h + 8`.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn load_half(words: &[u8; 4 * INTERLEAVED_ROWS], h: usize) -> __m256i {
    let half = &words[32 * h..32 * h + 32];
    // SAFETY: `half` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(half.as_ptr().cast()) }
}

/// Eight f16 as f32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn load_f16x8(v: &[half::f16]) -> __m256 {
    let v = &v[..HALF];
    // SAFETY: `v` is 16 readable bytes; `loadu` has no alignment requirement.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(v.as_ptr().cast()) })
}

/// `v`'s byte `picks[k]` of each word into byte `k` of the word ([`ZERO_BYTE`]: a zero byte).
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn pick_bytes(v: __m256i, picks: [u8; 4]) -> __m256i {
    // `vpshufb` picks within each 128-bit lane, whose word `w` starts at byte `4w`.
    let word_starts = _mm256_set_epi32(
        0x0c0c0c0c, 0x08080808, 0x04040404, 0, 0x0c0c0c0c, 0x08080808, 0x04040404, 0,
    );
    let picks = _mm256_set1_epi32(i32::from_le_bytes(picks));
    _mm256_shuffle_epi8(v, _mm256_add_epi8(picks, word_starts))
}

/// The scales and minimums of half a group's rows, a row per lane.
struct HalfScales {
    /// `scales[s]`, lane `r`: the 6-bit scale of row `r`'s sub-block `s` in both i16.
    scales: [__m256i; SUB_BLOCKS],
    /// `mins[g]`, lane `r`: the minimums of row `r`'s sub-blocks `2g` and `2g + 1`, two i16.
    mins: [__m256i; SUB_BLOCKS / 2],
}

/// The scales and minimums of half `h` of `block`'s rows (ggml's `get_scale_min_k4`, a row per
/// lane).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn half_scales(block: &BlockQ4Kx16, h: usize) -> HalfScales {
    let [a, b, c] = block.scales.each_ref().map(|s| load_half(s, h));
    let six = _mm256_set1_epi8(0x3f);
    let four = _mm256_set1_epi8(0x0f);
    let top = _mm256_set1_epi8(0x30);
    // Bytes k of a word: sub-block k (scales) and 4 + k (with the high bits from `a` and `b`).
    let scales_low = _mm256_and_si256(a, six);
    let mins_low = _mm256_and_si256(b, six);
    let scales_high = _mm256_or_si256(
        _mm256_and_si256(c, four),
        _mm256_and_si256(_mm256_srli_epi32::<2>(a), top),
    );
    let mins_high = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi32::<4>(c), four),
        _mm256_and_si256(_mm256_srli_epi32::<2>(b), top),
    );
    const ZERO: u8 = ZERO_BYTE;
    let scale = |v: __m256i, k: u8| pick_bytes(v, [k, ZERO, k, ZERO]);
    let pair = |v: __m256i, k: u8| pick_bytes(v, [k, ZERO, k + 1, ZERO]);
    HalfScales {
        scales: std::array::from_fn(|s| {
            let k = (s % 4) as u8;
            if s < 4 {
                scale(scales_low, k)
            } else {
                scale(scales_high, k)
            }
        }),
        mins: [
            pair(mins_low, 0),
            pair(mins_low, 2),
            pair(mins_high, 0),
            pair(mins_high, 2),
        ],
    }
}

/// Per 64 values `g` and half `h`, lane `r`: the exact sum of row `8h + r`'s products with `qs`
/// over sub-blocks `2g` and `2g + 1`, each times its scale; while the same stretch of the super-block
/// [`PREFETCH_BLOCKS`] further on is asked for (`ahead`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn scaled_products(
    block: &BlockQ4Kx16,
    scales: &[HalfScales; 2],
    qs: &[i8; QK_K],
    ahead: *const BlockQ4Kx16,
) -> [[__m256i; 2]; SUB_BLOCKS / 2] {
    let low4 = _mm256_set1_epi8(0x0f);
    let words = std::mem::offset_of!(BlockQ4Kx16, qs);
    let ahead = ahead as *const i8;
    let mut out = [[_mm256_setzero_si256(); 2]; SUB_BLOCKS / 2];
    for (j, out) in out.iter_mut().enumerate() {
        // Per half, the i16 pair sums of sub-blocks 2j (low nibbles) and 2j + 1 (high nibbles).
        let mut low = [_mm256_setzero_si256(); 2];
        let mut high = [_mm256_setzero_si256(); 2];
        for m in 0..8 {
            let k = 8 * j + m;
            prefetch_in_order(ahead.wrapping_add(words + 64 * k));
            if k < words / 64 {
                prefetch_in_order(ahead.wrapping_add(64 * k));
            }
            let first = _mm256_set1_epi32(quad(qs, 64 * j + 4 * m));
            let second = _mm256_set1_epi32(quad(qs, 64 * j + 32 + 4 * m));
            for h in 0..2 {
                let v = load_half(&block.qs[k], h);
                let lo = _mm256_and_si256(v, low4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low4);
                low[h] = _mm256_add_epi16(low[h], _mm256_maddubs_epi16(lo, first));
                high[h] = _mm256_add_epi16(high[h], _mm256_maddubs_epi16(hi, second));
            }
        }
        for h in 0..2 {
            let s = &scales[h].scales;
            out[h] = _mm256_add_epi32(
                _mm256_madd_epi16(low[h], s[2 * j]),
                _mm256_madd_epi16(high[h], s[2 * j + 1]),
            );
        }
    }
    out
}

/// Sixteen interleaved rows against `y` along llama.cpp's repacked GEMV (`GEMM` false: per
/// super-block, `acc = fma(S1, d dy, acc)` and `acc_m = fma(S2, dmin dy, acc_m)`) or GEMM (`GEMM`
/// true: the same per 64 values), `acc - acc_m` at the end.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_x16<const GEMM: bool>(w: &[BlockQ4Kx16], y: &[BlockQ8K]) -> [f32; INTERLEAVED_ROWS] {
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut acc_m = [_mm256_setzero_ps(); 2];
    for (i, (block, b)) in w.iter().zip(y).enumerate() {
        let scales = [half_scales(block, 0), half_scales(block, 1)];
        let ahead = w.as_ptr().wrapping_add(i + PREFETCH_BLOCKS);
        let products = scaled_products(block, &scales, &b.qs, ahead);
        let sub_sums = x86::store_i32x4(x86::sub_block_sums(b));
        let dy = _mm256_set1_ps(b.d);
        for h in 0..2 {
            let d_dy = _mm256_mul_ps(load_f16x8(&block.d[HALF * h..]), dy);
            let dmin_dy = _mm256_mul_ps(load_f16x8(&block.dmin[HALF * h..]), dy);
            let min_products =
                |g: usize| _mm256_madd_epi16(scales[h].mins[g], _mm256_set1_epi32(sub_sums[g]));
            if GEMM {
                for (g, s1) in products.iter().enumerate() {
                    acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1[h]), d_dy, acc[h]);
                    let s2 = _mm256_cvtepi32_ps(min_products(g));
                    acc_m[h] = _mm256_fmadd_ps(s2, dmin_dy, acc_m[h]);
                }
            } else {
                let s1 = products
                    .iter()
                    .fold(_mm256_setzero_si256(), |s1, p| _mm256_add_epi32(s1, p[h]));
                let s2 = (0..SUB_BLOCKS / 2).fold(_mm256_setzero_si256(), |s2, g| {
                    _mm256_add_epi32(s2, min_products(g))
                });
                acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), d_dy, acc[h]);
                acc_m[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s2), dmin_dy, acc_m[h]);
            }
        }
    }
    let mut out = [0f32; INTERLEAVED_ROWS];
    for (h, half) in out.chunks_exact_mut(HALF).enumerate() {
        // SAFETY: `half` has room for 8 f32; unaligned store.
        unsafe { _mm256_storeu_ps(half.as_mut_ptr(), _mm256_sub_ps(acc[h], acc_m[h])) };
    }
    out
}

/// Sixteen interleaved Q4_K rows (one group: `w`'s super-blocks) against `y` along `path`, which
/// must be one of the repacked paths (the only ones of a matrix whose rows come in sixteens).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q4_k_x16_q8_k(
    w: &[BlockQ4Kx16],
    y: &[BlockQ8K],
    path: KPath,
) -> [f32; INTERLEAVED_ROWS] {
    debug_assert!(matches!(path, KPath::RepackedGemv | KPath::RepackedGemm));
    if path == KPath::RepackedGemm {
        dot_x16::<true>(w, y)
    } else {
        dot_x16::<false>(w, y)
    }
}
