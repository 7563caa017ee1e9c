//! Q4_0 products of many tokens along llama.cpp's repacked Q4_0 GEMM (`q4_0_8x8`, taken for matrices
//! whose rows come in eights) on the AVX-512 tier, one weight row per int32 lane, as in
//! [`k_lanes`](super::k_lanes).
//!
//! A call unpacks each tile of sixteen rows once into [`RowsQ4_0`]: per four values of a block, a
//! vector whose lane `r` holds row `r`'s four nibbles as bytes. Per block and token, eight `vpdpbusd`
//! against the token's activations broadcast to every lane give each row's products with the
//! nibbles; less `8 sum(y)` they are the block's exact dot `S`, and the float step is llama.cpp's:
//! `acc = fma(S, d_x d_y, acc)`.

use std::{arch::x86_64::*, cell::RefCell};

use super::{
    k_lanes::{ROWS, tile_results},
    load_f16x16, load_f32x16, load_u8x64, load_u32x16,
};
use crate::{
    kernels::{
        tiles::{OutLayout, gemm_by_groups, gemm_by_tiles, pack_quads, pack_token_tiles},
        x86::f16_to_f32,
    },
    quant::{BlockQ4_0, BlockQ4_0x16, BlockQ8_0, QK},
};

/// Tokens per tile.
const TOKENS: usize = 8;
/// Four-value quads per block.
const QUADS: usize = QK / 4;

/// One block of a tile of rows, a row per lane.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct RowsQ4_0 {
    /// `q[k]`, lane `r`: the nibbles of values `4k..4k + 4` of row `r`, a byte each.
    q: [[u32; ROWS]; QUADS],
    d: [f32; ROWS],
}

/// One block of a tile of tokens.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct TokensQ8_0 {
    /// Per token, its 32 activations four to a word.
    qs: [[u32; QUADS]; TOKENS],
    /// Per token, `8 sum(y)`: what the nibbles' offset of 8 takes from the products.
    offsets: [i32; TOKENS],
    d: [f32; TOKENS],
}

/// Per-thread buffers: allocated on a thread's first product, then reused.
#[derive(Default)]
struct Scratch {
    tokens: Vec<TokensQ8_0>,
    rows: Vec<RowsQ4_0>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Unpacks a tile of rows (`nb` blocks each) into `out`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack_rows(rows: &[&[BlockQ4_0]; ROWS], out: &mut Vec<RowsQ4_0>) {
    const LOW4: u32 = 0x0f0f_0f0f;
    let nb = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    out.clear();
    out.resize(nb, RowsQ4_0::default());
    for (i, p) in out.iter_mut().enumerate() {
        for (r, row) in rows.iter().enumerate() {
            let b = &row[i];
            // Byte j holds value j in its low nibble and value j + 16 in its high one.
            for (k, word) in b.qs.as_chunks::<4>().0.iter().enumerate() {
                let w = u32::from_le_bytes(*word);
                p.q[k][r] = w & LOW4;
                p.q[k + QUADS / 2][r] = (w >> 4) & LOW4;
            }
            p.d[r] = f16_to_f32(b.d);
        }
    }
}

/// Unpacks a group of sixteen interleaved rows into `out`, a block each: their words are already a
/// row per lane, so each is split into its nibbles, no transpose.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack_group(group: &[BlockQ4_0x16], out: &mut Vec<RowsQ4_0>) {
    let low4 = _mm512_set1_epi8(0x0f);
    out.clear();
    out.resize(group.len(), RowsQ4_0::default());
    for (block, p) in group.iter().zip(out.iter_mut()) {
        for (k, words) in block.qs.iter().enumerate() {
            let v = load_u8x64(words);
            let high = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low4);
            // SAFETY: `p.q[k]` and `p.q[k + 4]` are 64 writable bytes each; unaligned stores.
            unsafe {
                _mm512_storeu_si512(p.q[k].as_mut_ptr().cast(), _mm512_and_si512(v, low4));
                _mm512_storeu_si512(p.q[k + QUADS / 2].as_mut_ptr().cast(), high);
            }
        }
        // SAFETY: `p.d` is 16 writable f32; unaligned store.
        unsafe { _mm512_storeu_ps(p.d.as_mut_ptr(), load_f16x16(&block.d)) };
    }
}

/// Unpacks `x` (tokens of `nb` blocks) into `out`, `nb` entries per tile of tokens; the last tile is
/// padded with zero tokens.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack_tokens(x: &[BlockQ8_0], nb: usize, out: &mut Vec<TokensQ8_0>) {
    pack_token_tiles::<TOKENS, _, _>((x, nb), out, |p, lane, b| {
        pack_quads(&b.qs, &mut p.qs[lane]);
        p.offsets[lane] = 8 * b.qs.iter().map(|&v| i32::from(v)).sum::<i32>();
        p.d[lane] = f16_to_f32(b.d);
    });
}

/// The results of one tile, `out[r][t]` for row `r` and token `t`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_tile(rows: &[RowsQ4_0], tokens: &[TokensQ8_0]) -> [[f32; TOKENS]; ROWS] {
    let n = rows.len().min(tokens.len());
    let mut acc = [_mm512_setzero_ps(); TOKENS];
    for (w, y) in rows[..n].iter().zip(&tokens[..n]) {
        let mut sums: [__m512i; TOKENS] = std::array::from_fn(|t| _mm512_set1_epi32(-y.offsets[t]));
        for (k, quad) in w.q.iter().enumerate() {
            let q = load_u32x16(quad);
            for (t, sum) in sums.iter_mut().enumerate() {
                *sum = _mm512_dpbusd_epi32(*sum, q, _mm512_set1_epi32(y.qs[t][k] as i32));
            }
        }
        let d = load_f32x16(&w.d);
        for (t, acc) in acc.iter_mut().enumerate() {
            let d_xy = _mm512_mul_ps(d, _mm512_set1_ps(y.d[t]));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[t]), d_xy, *acc);
        }
    }
    tile_results(acc)
}

/// Q4_0 rows of `w` against the tokens of `x` (`nb` blocks each) along llama.cpp's repacked Q4_0
/// GEMM, into `out` as `layout` places them, with the bits of the single-row repacked dots.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](crate::kernels::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn gemm_q4_0_q8_0_repacked(
    w: &[BlockQ4_0],
    x: &[BlockQ8_0],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    SCRATCH.with_borrow_mut(|s| {
        gemm_by_tiles(
            (w, x, nb),
            (out, layout),
            (&mut s.tokens, &mut s.rows),
            |x, nb, out| pack_tokens(x, nb, out),
            |tile, out| pack_rows(tile, out),
            |rows, tokens| dot_tile(rows, tokens),
        );
    });
}

/// [`gemm_q4_0_q8_0_repacked`] of Q4_0 rows interleaved sixteen at a time (`w`: groups of `nb`
/// blocks), with the same bits.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](crate::kernels::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn gemm_q4_0_x16_q8_0_repacked(
    w: &[BlockQ4_0x16],
    x: &[BlockQ8_0],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    SCRATCH.with_borrow_mut(|s| {
        gemm_by_groups(
            (w, x, nb),
            (out, layout),
            (&mut s.tokens, &mut s.rows),
            |x, nb, out| pack_tokens(x, nb, out),
            |group, buf| pack_group(group, buf),
            |rows, tokens| dot_tile(rows, tokens),
        );
    });
}
