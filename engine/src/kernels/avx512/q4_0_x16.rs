//! Q4_0 decode over rows held interleaved sixteen at a time ([`BlockQ4_0x16`]), a row per int32
//! lane, along llama.cpp's repacked Q4_0 GEMV (`q4_0_8x8`, which it runs for every Q4_0 matrix whose
//! rows come in eights): per block, each row's exact integer dot `S`, then `acc = fma(S, d_x d_y,
//! acc)`.
//!
//! A word of the interleaved nibbles is four bytes of one row: an `and` and a shift split it into
//! values `4k..4k + 4` and `16 + 4k..+4` of each row, and two `vpdpbusd` against four activations
//! broadcast to every lane add their products to all sixteen rows' sums. The nibbles' offset of 8
//! takes `8 sum(y)` from every row alike, so the sums start from it.

use std::{arch::x86_64::*, cell::RefCell};

use super::{load_f16x16, load_u8x64};
use crate::{
    kernels::x86::{f16_to_f32, prefetch_in_order, quad},
    quant::{BlockQ4_0x16, BlockQ8_0, INTERLEAVED_ROWS},
};

/// Blocks ahead of the one being read whose lines the dot asks for: a group's blocks are one
/// stream of 288 bytes each, about four KiB ahead.
const PREFETCH_BLOCKS: usize = 16;

thread_local! {
    /// Per block of the activations: `-8 sum(y)`, formed once per call for all its groups.
    static STARTS: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
}

/// One group of sixteen rows (`group`'s blocks) against `y`, whose blocks' sums start from `starts`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_group(group: &[BlockQ4_0x16], y: &[BlockQ8_0], starts: &[i32]) -> [f32; INTERLEAVED_ROWS] {
    let low4 = _mm512_set1_epi8(0x0f);
    let words = std::mem::offset_of!(BlockQ4_0x16, qs);
    let mut acc = _mm512_setzero_ps();
    for (i, ((block, b), &start)) in group.iter().zip(y).zip(starts).enumerate() {
        let ahead = group.as_ptr().wrapping_add(i + PREFETCH_BLOCKS) as *const i8;
        prefetch_in_order(ahead);
        let mut low = _mm512_set1_epi32(start);
        let mut high = _mm512_setzero_si512();
        // Word `k` in memory order, a prefetch each: written out, so that both sums stay in
        // registers across the prefetches.
        macro_rules! word {
            ($($k:literal),*) => {$(
                prefetch_in_order(ahead.wrapping_add(words + 64 * $k));
                let v = load_u8x64(&block.qs[$k]);
                let y_low = _mm512_set1_epi32(quad(&b.qs, 4 * $k));
                let y_high = _mm512_set1_epi32(quad(&b.qs, 16 + 4 * $k));
                low = _mm512_dpbusd_epi32(low, _mm512_and_si512(v, low4), y_low);
                high = _mm512_dpbusd_epi32(
                    high,
                    _mm512_and_si512(_mm512_srli_epi16::<4>(v), low4),
                    y_high,
                );
            )*};
        }
        word!(0, 1, 2, 3);
        let d = _mm512_mul_ps(load_f16x16(&block.d), _mm512_set1_ps(f16_to_f32(b.d)));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(low, high)), d, acc);
    }
    let mut out = [0f32; INTERLEAVED_ROWS];
    // SAFETY: `out` has room for 16 f32; unaligned store.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), acc) };
    out
}

/// `out[r]` = row `r` of the interleaved groups `w` (of `y.len()` blocks each) against `y`, along
/// llama.cpp's repacked Q4_0 GEMV; `out` holds at most sixteen results per group.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](crate::kernels::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn gemv_q4_0_x16_q8_0(w: &[BlockQ4_0x16], y: &[BlockQ8_0], out: &mut [f32]) {
    let nb = y.len();
    if nb == 0 {
        out.fill(0.0);
        return;
    }
    STARTS.with_borrow_mut(|starts| {
        starts.clear();
        starts.extend(
            y.iter()
                .map(|b| -8 * b.qs.iter().map(|&v| i32::from(v)).sum::<i32>()),
        );
        for (group, results) in w.chunks_exact(nb).zip(out.chunks_mut(INTERLEAVED_ROWS)) {
            let rows = dot_group(group, y, starts);
            results.copy_from_slice(&rows[..results.len()]);
        }
    });
}
