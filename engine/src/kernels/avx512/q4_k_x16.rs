//! Q4_K dots of sixteen rows held interleaved ([`BlockQ4Kx16`]), a row per int32 lane: decode and
//! the few-token products.
//!
//! A word of the interleaved nibbles is four bytes of one row, so one `vpdpbusd` against four
//! activations broadcast to every lane adds four products to each of the sixteen rows at once: a
//! super-block of sixteen rows is 64 of them, with no unpacking, no shuffles and no reduction across
//! lanes (the file's layout spends most of a row's instructions on those). Each sub-block's sums are
//! scaled by one `vpmulld`, the minimums times the activation sums are four `vpdpwssd` of i16
//! pairs, and the float steps are those of llama.cpp's repacked Q4_K kernels, a row per lane, so
//! every result has the bits of the single-row dot along the same path.

use std::arch::x86_64::*;

use super::{load_f16x16, load_u8x64};
use crate::{
    kernels::{
        k_numerics::KPath,
        x86::{self, prefetch_in_order, quad},
    },
    quant::{BlockQ4Kx16, BlockQ8K, INTERLEAVED_ROWS, QK_K},
};

/// Sub-blocks (of 32 values, one scale and one minimum each) per super-block.
const SUB_BLOCKS: usize = QK_K / 32;

/// The scales and minimums of a super-block of sixteen rows, a row per lane.
pub(super) struct GroupScales {
    /// `scales[s]`, lane `r`: the 6-bit scale of row `r`'s sub-block `s`, as an i32.
    pub(super) scales: [__m512i; SUB_BLOCKS],
    /// `mins[g]`, lane `r`: the minimums of row `r`'s sub-blocks `2g` and `2g + 1`, two i16.
    pub(super) mins: [__m512i; SUB_BLOCKS / 2],
}

/// An entry of [`pick_bytes`]'s picks that makes a zero byte.
pub(super) const ZERO_BYTE: u8 = 0x80;

/// `v`'s byte `picks[k]` of each word into byte `k` of the word ([`ZERO_BYTE`]: a zero byte).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn pick_bytes(v: __m512i, picks: [u8; 4]) -> __m512i {
    // `vpshufb` picks within each 128-bit lane, whose word `w` starts at byte `4w`.
    let word_starts = _mm512_set_epi32(
        0x0c0c0c0c, 0x08080808, 0x04040404, 0, 0x0c0c0c0c, 0x08080808, 0x04040404, 0, 0x0c0c0c0c,
        0x08080808, 0x04040404, 0, 0x0c0c0c0c, 0x08080808, 0x04040404, 0,
    );
    let picks = _mm512_set1_epi32(i32::from_le_bytes(picks));
    _mm512_shuffle_epi8(v, _mm512_add_epi8(picks, word_starts))
}

/// The scales and minimums of `block`'s sixteen rows (ggml's `get_scale_min_k4`, a row per lane).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn group_scales(block: &BlockQ4Kx16) -> GroupScales {
    let [a, b, c] = block.scales.each_ref().map(|s| load_u8x64(s));
    let six = _mm512_set1_epi8(0x3f);
    let four = _mm512_set1_epi8(0x0f);
    let top = _mm512_set1_epi8(0x30);
    // Bytes k of a word: sub-block k (scales) and 4 + k (with the high bits from `a` and `b`).
    let scales_low = _mm512_and_si512(a, six);
    let mins_low = _mm512_and_si512(b, six);
    let scales_high = _mm512_or_si512(
        _mm512_and_si512(c, four),
        _mm512_and_si512(_mm512_srli_epi32::<2>(a), top),
    );
    let mins_high = _mm512_or_si512(
        _mm512_and_si512(_mm512_srli_epi32::<4>(c), four),
        _mm512_and_si512(_mm512_srli_epi32::<2>(b), top),
    );
    const ZERO: u8 = ZERO_BYTE;
    let scale = |v: __m512i, k: u8| pick_bytes(v, [k, ZERO, ZERO, ZERO]);
    let pair = |v: __m512i, k: u8| pick_bytes(v, [k, ZERO, k + 1, ZERO]);
    GroupScales {
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

/// Word `k` of `block`'s nibbles split into the low nibbles (values `64j + 4m..+4` of each row,
/// for word `8j + m`) and the high ones (values `64j + 32 + 4m..+4`), as unsigned bytes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn nibbles(block: &BlockQ4Kx16, k: usize) -> (__m512i, __m512i) {
    let four = _mm512_set1_epi8(0x0f);
    let v = load_u8x64(&block.qs[k]);
    (
        _mm512_and_si512(v, four),
        _mm512_and_si512(_mm512_srli_epi16::<4>(v), four),
    )
}

/// Per sub-block `s`, lane `r`: the exact sum of row `r`'s products with `qs` over sub-block `s`,
/// while the same stretch of super-block `PREFETCH_BLOCKS` further on is asked for (`ahead`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn sub_block_products(
    block: &BlockQ4Kx16,
    qs: &[i8; QK_K],
    ahead: *const BlockQ4Kx16,
) -> [__m512i; SUB_BLOCKS] {
    // Two sums per sub-block (even and odd words), so that each chain of `vpdpbusd` is four long.
    let mut sums = [[_mm512_setzero_si512(); 2]; SUB_BLOCKS];
    let words = std::mem::offset_of!(BlockQ4Kx16, qs);
    let ahead = ahead as *const i8;
    // Word `8j + m`, in memory order, a prefetch each (the scales' lines with the first four):
    // written out, so that every sum stays in a register across the prefetches.
    macro_rules! word {
        ($j:literal, $m:literal) => {{
            let k = 8 * $j + $m;
            prefetch_in_order(ahead.wrapping_add(words + 64 * k));
            if k < words / 64 {
                prefetch_in_order(ahead.wrapping_add(64 * k));
            }
            let (low, high) = nibbles(block, k);
            let (first, second) = (64 * $j + 4 * $m, 64 * $j + 32 + 4 * $m);
            let (even, odd) = (2 * $j, 2 * $j + 1);
            let low =
                _mm512_dpbusd_epi32(sums[even][$m % 2], low, _mm512_set1_epi32(quad(qs, first)));
            let high =
                _mm512_dpbusd_epi32(sums[odd][$m % 2], high, _mm512_set1_epi32(quad(qs, second)));
            sums[even][$m % 2] = low;
            sums[odd][$m % 2] = high;
        }};
    }
    macro_rules! group {
        ($($j:literal),*) => {$(
            word!($j, 0); word!($j, 1); word!($j, 2); word!($j, 3);
            word!($j, 4); word!($j, 5); word!($j, 6); word!($j, 7);
        )*};
    }
    group!(0, 1, 2, 3);
    sums.map(|[a, b]| _mm512_add_epi32(a, b))
}

/// Sixteen interleaved rows against `y` along llama.cpp's repacked GEMV (`GEMM` false: per
/// super-block, `acc = fma(S1, d dy, acc)` and `acc_m = fma(S2, dmin dy, acc_m)`) or GEMM (`GEMM`
/// true: the same per 64 values), `acc - acc_m` at the end.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_x16<const GEMM: bool>(w: &[BlockQ4Kx16], y: &[BlockQ8K]) -> [f32; INTERLEAVED_ROWS] {
    let mut acc = _mm512_setzero_ps();
    let mut acc_m = _mm512_setzero_ps();
    for (i, (block, b)) in w.iter().zip(y).enumerate() {
        let GroupScales { scales, mins } = group_scales(block);
        let ahead = w.as_ptr().wrapping_add(i + PREFETCH_BLOCKS);
        let sums = sub_block_products(block, &b.qs, ahead);
        let sub_sums = x86::store_i32x4(x86::sub_block_sums(b));
        let dy = _mm512_set1_ps(b.d);
        let d_dy = _mm512_mul_ps(load_f16x16(&block.d), dy);
        let dmin_dy = _mm512_mul_ps(load_f16x16(&block.dmin), dy);
        let scaled = |s: usize| _mm512_mullo_epi32(sums[s], scales[s]);
        let min_products = |g: usize, s2: __m512i| {
            _mm512_dpwssd_epi32(s2, mins[g], _mm512_set1_epi32(sub_sums[g]))
        };
        if GEMM {
            for g in 0..SUB_BLOCKS / 2 {
                let s1 = _mm512_add_epi32(scaled(2 * g), scaled(2 * g + 1));
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), d_dy, acc);
                let s2 = min_products(g, _mm512_setzero_si512());
                acc_m = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s2), dmin_dy, acc_m);
            }
        } else {
            let s1 = (1..SUB_BLOCKS).fold(scaled(0), |s1, s| _mm512_add_epi32(s1, scaled(s)));
            let s2 = (0..SUB_BLOCKS / 2).fold(_mm512_setzero_si512(), |s2, g| min_products(g, s2));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), d_dy, acc);
            acc_m = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s2), dmin_dy, acc_m);
        }
    }
    let mut out = [0f32; INTERLEAVED_ROWS];
    // SAFETY: `out` has room for 16 f32; unaligned store.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), _mm512_sub_ps(acc, acc_m)) };
    out
}

/// Super-blocks ahead of the one being read whose lines [`sub_block_products`] asks for: a group's
/// super-blocks are one stream of 2304 bytes each, which the hardware prefetchers alone left the
/// dots waiting on (the loads' first uses took most of the kernel's samples). Addresses past the
/// matrix are only hints: a prefetch never faults.
const PREFETCH_BLOCKS: usize = 2;

/// Sixteen interleaved Q4_K rows (one group: `w`'s super-blocks) against `y` along `path`, which
/// must be one of the repacked paths (the only ones of a matrix whose rows come in sixteens).
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](crate::kernels::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
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
