//! Q6_K dots of sixteen rows held interleaved ([`BlockQ6Kx16`]), a row per int32 lane: decode and
//! the products of fewer tokens than llama.cpp tiles (its `ggml_vec_dot_q6_K_q8_K` for every Q6_K
//! matrix, which it never repacks).
//!
//! ggml's dot keeps eight int32 lanes per row: lane `l` adds, over every 32 values, the scaled
//! products of values `4l..4l + 4`. A word of the interleaved bits is four bytes of one row, and the
//! four values of each of its bytes' quads fall in one such lane, so eight vectors hold the eight
//! lanes of all sixteen rows: per word of high bits, four `vpmaddubs` against four activations
//! broadcast to every lane and four `vpdpwssd` by the rows' scales add to one lane's vector, with no
//! shuffles of the values and no reduction across lanes. The float steps are ggml's (a fused
//! multiply-add per lane and super-block, `hsum_float_8` at the end), done for sixteen rows at once,
//! so every result has the bits of the single-row dot.

use std::arch::x86_64::*;

use super::{
    load_f16x16, load_u8x64,
    q4_k_x16::{ZERO_BYTE, pick_bytes},
    q8_0_lanes::lane_totals,
};
use crate::{
    kernels::x86::{prefetch_l2_in_order, quad},
    quant::{BlockQ6Kx16, BlockQ8K, INTERLEAVED_ROWS, QK_K},
};

/// ggml's int32 lanes per row.
const LANES: usize = 8;

/// Super-blocks ahead of the one being read whose lines the dot asks for into the second-level cache
/// (see the Q4_K kernel's).
const PREFETCH_BLOCKS: usize = 2;

/// Lane `r`: row `r`'s scale `s` as an i16 in both halves, for `vpdpwssd` of a quad's two pair sums.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn scale_pairs(words: &[__m512i; 4], s: usize) -> __m512i {
    let k = (s % 4) as u8;
    _mm512_srai_epi16::<8>(pick_bytes(words[s / 4], [ZERO_BYTE, k, ZERO_BYTE, k]))
}

/// Lane `r`: `32 sc[2l]` and `32 sc[2l + 1]` of row `r`'s scales `sc`, two i16: lane `l`'s offset
/// against the activations' 16-value sums.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn offset_scales(words: &[__m512i; 4], l: usize) -> __m512i {
    let k = (2 * l % 4) as u8;
    // The scales to the high byte of each i16, then an arithmetic shift: `sc << 5`, sign kept.
    _mm512_srai_epi16::<3>(pick_bytes(words[l / 2], [ZERO_BYTE, k, ZERO_BYTE, k + 1]))
}

/// The unsigned 6-bit values of high-bits word `m` (`n = m / 8`, `q = m % 8`) of each row, four
/// vectors: values `128n + 32c + 4q..+4` in `c`, from the low (`c` even) or high nibbles of low-bits
/// words `16n + q` (`c` 0 and 2) and `16n + q + 8` (1 and 3) with bit pair `c` of the word.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn values(block: &BlockQ6Kx16, m: usize) -> [__m512i; 4] {
    /// `(a & b) | c` for `vpternlogd`.
    const A_AND_B_OR_C: i32 = 0xea;
    let (n, q) = (m / 8, m % 8);
    let low4 = _mm512_set1_epi8(0x0f);
    let high2 = _mm512_set1_epi8(0x30);
    let h = load_u8x64(&block.qh[m]);
    let first = load_u8x64(&block.ql[16 * n + q]);
    let second = load_u8x64(&block.ql[16 * n + q + 8]);
    let with_high = |high: __m512i, low: __m512i| {
        _mm512_ternarylogic_epi32::<A_AND_B_OR_C>(high, high2, _mm512_and_si512(low, low4))
    };
    [
        with_high(_mm512_slli_epi16::<4>(h), first),
        with_high(_mm512_slli_epi16::<2>(h), second),
        with_high(h, _mm512_srli_epi16::<4>(first)),
        with_high(_mm512_srli_epi16::<2>(h), _mm512_srli_epi16::<4>(second)),
    ]
}

/// Lane `l` of each row's ggml lanes for one super-block, `l` in `0..8`: the offsets, then the
/// scaled products, while the same stretch of the super-block `PREFETCH_BLOCKS` further on is
/// asked for (`ahead`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn lane_sums(block: &BlockQ6Kx16, y: &BlockQ8K, ahead: *const BlockQ6Kx16) -> [__m512i; LANES] {
    let ahead = ahead as *const i8;
    let line = |offset: usize| prefetch_l2_in_order(ahead.wrapping_add(offset));
    let words = block.scales.each_ref().map(|w| load_u8x64(w));
    for (w, _) in block.scales.iter().enumerate() {
        line(std::mem::offset_of!(BlockQ6Kx16, scales) + 64 * w);
    }
    line(0);
    let neg_bsums = |l: usize| {
        let pair = [-y.bsums[2 * l], -y.bsums[2 * l + 1]].map(|b| b as u16 as u32);
        (pair[0] | pair[1] << 16) as i32
    };
    let mut lanes: [__m512i; LANES] = std::array::from_fn(|l| {
        let offsets = _mm512_set1_epi32(neg_bsums(l));
        _mm512_dpwssd_epi32(_mm512_setzero_si512(), offset_scales(&words, l), offsets)
    });
    let ql = std::mem::offset_of!(BlockQ6Kx16, ql);
    let qh = std::mem::offset_of!(BlockQ6Kx16, qh);
    // High-bits word `m = 8n + q` in order, its lane `q`: written out, so that every lane stays in
    // a register across the prefetches.
    macro_rules! word {
        ($n:literal, $q:literal, $scales:ident) => {{
            let m = 8 * $n + $q;
            line(qh + 64 * m);
            line(ql + 64 * (16 * $n + $q));
            line(ql + 64 * (16 * $n + $q + 8));
            for (c, v) in values(block, m).into_iter().enumerate() {
                let y = _mm512_set1_epi32(quad(&y.qs, 128 * $n + 32 * c + 4 * $q));
                lanes[$q] = _mm512_dpwssd_epi32(lanes[$q], _mm512_maddubs_epi16(v, y), $scales[c]);
            }
        }};
    }
    macro_rules! half {
        ($n:literal, $half:literal, $($q:literal),*) => {{
            let scales: [__m512i; 4] =
                std::array::from_fn(|c| scale_pairs(&words, 8 * $n + 2 * c + $half));
            $(word!($n, $q, scales);)*
        }};
    }
    half!(0, 0, 0, 1, 2, 3);
    half!(0, 1, 4, 5, 6, 7);
    half!(1, 0, 0, 1, 2, 3);
    half!(1, 1, 4, 5, 6, 7);
    lanes
}

/// Sixteen interleaved Q6_K rows (one group: `w`'s super-blocks) against `y` along ggml's
/// `vec_dot_q6_K_q8_K` (llama.cpp's only path for Q6_K products of fewer than eight tokens).
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](crate::kernels::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q6_k_x16_q8_k(
    w: &[BlockQ6Kx16],
    y: &[BlockQ8K],
) -> [f32; INTERLEAVED_ROWS] {
    const { assert!(QK_K == 256) };
    let mut acc = [_mm512_setzero_ps(); LANES];
    for (i, (block, b)) in w.iter().zip(y).enumerate() {
        let ahead = w.as_ptr().wrapping_add(i + PREFETCH_BLOCKS);
        let lanes = lane_sums(block, b, ahead);
        let d = _mm512_mul_ps(_mm512_set1_ps(b.d), load_f16x16(&block.d));
        for (acc, lane) in acc.iter_mut().zip(lanes) {
            *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lane), *acc);
        }
    }
    lane_totals(&acc)
}
