//! Q8_0 dots of sixteen rows held interleaved ([`BlockQ8_0x16`]), a row per int32 lane: decode and
//! the few-token products, with the bits of ggml's eight-lane Q8_0 dot.
//!
//! Word `l` of an interleaved block holds the four values of ggml's lane `l` of each row, so eight
//! vectors hold the eight lanes of all sixteen rows. `vpdpbusd` multiplies unsigned bytes by signed
//! ones: the weights become unsigned by flipping their sign bits (`w + 128`), and each lane starts
//! from `-128` times the sum of its four activations, which is the same for every row, so one
//! `vpdpbusd` per word gives all sixteen rows' exact lane sums, and one fused multiply-add per lane
//! and block takes them into ggml's float lanes.

use std::arch::x86_64::*;

use super::{load_f16x16, load_u8x64, q8_0_lanes::lane_totals};
use crate::{
    kernels::x86::{self, f16_to_f32, load_i8x32, prefetch_in_order, quad},
    quant::{BlockQ8_0, BlockQ8_0x16, INTERLEAVED_ROWS, QK},
};

/// ggml's int32 lanes per row and block.
const LANES: usize = QK / 4;

/// Blocks ahead of the one being read whose lines the dot asks for: a group's blocks are one
/// stream of 544 bytes each, about four KiB ahead.
const PREFETCH_BLOCKS: usize = 8;

/// Per lane `l`: `-128` times the sum of `y`'s activations `4l..4l + 4`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn lane_starts(y: &BlockQ8_0) -> [i32; LANES] {
    let sums = _mm256_dpbusd_epi32(
        _mm256_setzero_si256(),
        _mm256_set1_epi8(1),
        load_i8x32(&y.qs),
    );
    x86::store_i32x8(_mm256_sub_epi32(
        _mm256_setzero_si256(),
        _mm256_slli_epi32::<7>(sums),
    ))
}

/// Sixteen interleaved Q8_0 rows (one group: `w`'s blocks) against `y` along ggml's
/// `vec_dot_q8_0_q8_0`.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](crate::kernels::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn vec_dot_q8_0_x16_q8_0(
    w: &[BlockQ8_0x16],
    y: &[BlockQ8_0],
) -> [f32; INTERLEAVED_ROWS] {
    let sign_bits = _mm512_set1_epi8(i8::MIN);
    let mut acc = [_mm512_setzero_ps(); LANES];
    let words = std::mem::offset_of!(BlockQ8_0x16, qs);
    for (i, (block, b)) in w.iter().zip(y).enumerate() {
        let ahead = w.as_ptr().wrapping_add(i + PREFETCH_BLOCKS) as *const i8;
        prefetch_in_order(ahead);
        let starts = lane_starts(b);
        let d = _mm512_mul_ps(load_f16x16(&block.d), _mm512_set1_ps(f16_to_f32(b.d)));
        // Word `l` in memory order, a prefetch each: written out, so that every lane stays in a
        // register across the prefetches.
        macro_rules! lane {
            ($($l:literal),*) => {$(
                prefetch_in_order(ahead.wrapping_add(words + 64 * $l));
                let x = _mm512_xor_si512(load_u8x64(&block.qs[$l]), sign_bits);
                let y = _mm512_set1_epi32(quad(&b.qs, 4 * $l));
                let sums = _mm512_dpbusd_epi32(_mm512_set1_epi32(starts[$l]), x, y);
                acc[$l] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sums), acc[$l]);
            )*};
        }
        lane!(0, 1, 2, 3, 4, 5, 6, 7);
    }
    lane_totals(&acc)
}
