//! Q6_K dots of sixteen rows held interleaved ([`BlockQ6Kx16`]) on the AVX2 tier, each half of a
//! group (eight rows) a row per int32 lane: decode and the products of fewer tokens than llama.cpp
//! tiles (its `ggml_vec_dot_q6_K_q8_K` for every Q6_K matrix, which it never repacks).
//!
//! ggml's dot keeps eight int32 lanes per row: lane `l` adds, over every 32 values, the scaled
//! products of values `4l..4l + 4`. A word of the interleaved bits is four bytes of one row, and the
//! four values of each of its bytes' quads fall in one such lane, so eight vectors hold the eight
//! lanes of a half's rows: per word of high bits, four `vpmaddubsw` against four activations
//! broadcast to every lane and four `vpmaddwd` by the rows' scales add to one lane's vector, with no
//! shuffles of the values and no reduction across lanes. The float steps are ggml's (a fused
//! multiply-add per lane and super-block, `hsum_float_8` at the end), done for eight rows at once,
//! so every result has the bits of the single-row dot.

use std::arch::x86_64::*;

use super::q4_k_x16::{ZERO_BYTE, load_f16x8, load_half, pick_bytes};
use crate::{
    kernels::x86::{prefetch_l2_in_order, quad},
    quant::{BlockQ6Kx16, BlockQ8K, INTERLEAVED_ROWS, QK_K},
};

/// ggml's int32 lanes per row.
const LANES: usize = 8;
/// Rows per vector: half of a group.
const HALF: usize = INTERLEAVED_ROWS / 2;

/// Super-blocks ahead of the one being read whose lines the dot asks for into the second-level cache.
const PREFETCH_BLOCKS: usize = 4;

/// Lane `r`: row `r`'s scale `s` as an i16 in both halves, for `vpmaddwd` of a quad's two pair sums.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn scale_pairs(words: &[__m256i; 4], s: usize) -> __m256i {
    let k = (s % 4) as u8;
    _mm256_srai_epi16::<8>(pick_bytes(words[s / 4], [ZERO_BYTE, k, ZERO_BYTE, k]))
}

/// Lane `r`: `32 sc[2l]` and `32 sc[2l + 1]` of row `r`'s scales `sc`, two i16: lane `l`'s offset
/// against the activations' 16-value sums.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn offset_scales(words: &[__m256i; 4], l: usize) -> __m256i {
    let k = (2 * l % 4) as u8;
    // The scales to the high byte of each i16, then an arithmetic shift: `sc << 5`, sign kept.
    _mm256_srai_epi16::<3>(pick_bytes(words[l / 2], [ZERO_BYTE, k, ZERO_BYTE, k + 1]))
}

/// The unsigned 6-bit values of high-bits word `m` (`n = m / 8`, `q = m % 8`) of half `h`'s rows,
/// four vectors: values `128n + 32c + 4q..+4` in `c`, from the low (`c` even) or high nibbles of
/// low-bits words `16n + q` (`c` 0 and 2) and `16n + q + 8` (1 and 3) with bit pair `c` of the word.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn values(block: &BlockQ6Kx16, m: usize, h: usize) -> [__m256i; 4] {
    let (n, q) = (m / 8, m % 8);
    let low4 = _mm256_set1_epi8(0x0f);
    let high2 = _mm256_set1_epi8(0x30);
    let bits = load_half(&block.qh[m], h);
    let first = load_half(&block.ql[16 * n + q], h);
    let second = load_half(&block.ql[16 * n + q + 8], h);
    let with_high = |high: __m256i, low: __m256i| {
        _mm256_or_si256(_mm256_and_si256(high, high2), _mm256_and_si256(low, low4))
    };
    [
        with_high(_mm256_slli_epi16::<4>(bits), first),
        with_high(_mm256_slli_epi16::<2>(bits), second),
        with_high(bits, _mm256_srli_epi16::<4>(first)),
        with_high(_mm256_srli_epi16::<2>(bits), _mm256_srli_epi16::<4>(second)),
    ]
}

/// Lane `l` of each of half `h`'s rows' ggml lanes for one super-block, `l` in `0..8`: the offsets,
/// then the scaled products; while the lines of the super-block at `ahead` are asked for, a few with
/// each word.
///
/// Not inlined: in the caller's loop over both halves, the compiler keeps the activations'
/// broadcasts from the first half for the second, 64 vectors that live on the stack, and the dot
/// spent its time moving them.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline(never)]
fn lane_sums(
    block: &BlockQ6Kx16,
    y: &BlockQ8K,
    h: usize,
    ahead: *const BlockQ6Kx16,
) -> [__m256i; LANES] {
    let ahead = ahead as *const i8;
    let lines = size_of::<BlockQ6Kx16>().div_ceil(64);
    let words = block.scales.each_ref().map(|w| load_half(w, h));
    let neg_bsums = |l: usize| {
        let pair = [-y.bsums[2 * l], -y.bsums[2 * l + 1]].map(|b| b as u16 as u32);
        (pair[0] | pair[1] << 16) as i32
    };
    let mut lanes: [__m256i; LANES] = std::array::from_fn(|l| {
        _mm256_madd_epi16(offset_scales(&words, l), _mm256_set1_epi32(neg_bsums(l)))
    });
    // High-bits word `m = 8n + q` adds to lane `q`; its values `c` take scale `8n + 2c + q / 4`.
    // Written out, so that every lane stays in a register.
    macro_rules! word {
        ($n:literal, $q:literal, $scales:ident) => {{
            let m = 8 * $n + $q;
            // The first half asks for the block ahead: four lines with each of its 16 words.
            if h == 0 {
                for line in 4 * m..(4 * m + 4).min(lines) {
                    prefetch_l2_in_order(ahead.wrapping_add(64 * line));
                }
            }
            for (c, v) in values(block, m, h).into_iter().enumerate() {
                let y = _mm256_set1_epi32(quad(&y.qs, 128 * $n + 32 * c + 4 * $q));
                let products = _mm256_madd_epi16(_mm256_maddubs_epi16(v, y), $scales[c]);
                lanes[$q] = _mm256_add_epi32(lanes[$q], products);
            }
        }};
    }
    macro_rules! part {
        ($n:literal, $part:literal, $($q:literal),*) => {{
            let scales: [__m256i; 4] =
                std::array::from_fn(|c| scale_pairs(&words, 8 * $n + 2 * c + $part));
            $(word!($n, $q, scales);)*
        }};
    }
    part!(0, 0, 0, 1, 2, 3);
    part!(0, 1, 4, 5, 6, 7);
    part!(1, 0, 0, 1, 2, 3);
    part!(1, 1, 4, 5, 6, 7);
    lanes
}

/// ggml's `hsum_float_8` of each row's eight float lanes, eight rows at once (`acc[l]`, lane `r`:
/// row `r`'s lane `l`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn lane_totals(acc: &[__m256; LANES]) -> __m256 {
    let t: [__m256; 4] = std::array::from_fn(|k| _mm256_add_ps(acc[k + 4], acc[k]));
    _mm256_add_ps(_mm256_add_ps(t[0], t[2]), _mm256_add_ps(t[1], t[3]))
}

/// Sixteen interleaved Q6_K rows (one group: `w`'s super-blocks) against `y` along ggml's
/// `vec_dot_q6_K_q8_K` (llama.cpp's only path for Q6_K products of fewer than eight tokens).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot_q6_k_x16_q8_k(
    w: &[BlockQ6Kx16],
    y: &[BlockQ8K],
) -> [f32; INTERLEAVED_ROWS] {
    const { assert!(QK_K == 256) };
    let mut acc = [[_mm256_setzero_ps(); LANES]; 2];
    for (i, (block, b)) in w.iter().zip(y).enumerate() {
        let ahead = w.as_ptr().wrapping_add(i + PREFETCH_BLOCKS);
        for (h, acc) in acc.iter_mut().enumerate() {
            let lanes = lane_sums(block, b, h, ahead);
            let d = _mm256_mul_ps(_mm256_set1_ps(b.d), load_f16x8(&block.d[HALF * h..]));
            for (acc, lane) in acc.iter_mut().zip(lanes) {
                *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lane), *acc);
            }
        }
    }
    let mut out = [0f32; INTERLEAVED_ROWS];
    for (half, acc) in out.chunks_exact_mut(HALF).zip(&acc) {
        // SAFETY: `half` has room for 8 f32; unaligned store.
        unsafe { _mm256_storeu_ps(half.as_mut_ptr(), lane_totals(acc)) };
    }
    out
}
