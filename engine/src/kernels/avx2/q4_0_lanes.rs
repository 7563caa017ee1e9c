//! Q4_0 products of many tokens along llama.cpp's repacked Q4_0 GEMM (`q4_0_8x8`, taken for matrices
//! whose rows come in eights) on the AVX2 tier, one weight row per int32 lane, as ggml's interleaved
//! `q4_0x8` layout has it.
//!
//! A call unpacks each tile of eight rows once into [`RowsQ4_0`]: per four values of a block, a
//! vector whose lane `r` holds row `r`'s four nibbles as bytes. Per block and token, `vpmaddubsw`
//! against four of the token's activations broadcast to every lane gives each row two i16 sums of two
//! products; the eight of a block add up in i16 (at most 16 x 15 x 128 in magnitude, no overflow) and
//! one `vpmaddwd` by ones makes them the row's sum. Less `8 sum(y)` that is the block's exact dot `S`,
//! and the float step is llama.cpp's: `acc = fma(S, d_x d_y, acc)`.

use std::{arch::x86_64::*, cell::RefCell};

use super::{lane_results, load_f32x8, load_u32x8};
use crate::{
    kernels::{
        tiles::{OutLayout, gemm_by_tiles, pack_quads, pack_token_tiles},
        x86::f16_to_f32,
    },
    quant::{BlockQ4_0, BlockQ8_0, QK},
};

/// Weight rows per tile: one per int32 lane of a vector.
const ROWS: usize = 8;
/// Tokens per tile.
const TOKENS: usize = 4;
/// Four-value quads per block.
const QUADS: usize = QK / 4;

/// One block of a tile of rows, a row per lane.
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
struct RowsQ4_0 {
    /// `q[k]`, lane `r`: the nibbles of values `4k..4k + 4` of row `r`, a byte each.
    q: [[u32; ROWS]; QUADS],
    d: [f32; ROWS],
}

/// One block of a tile of tokens.
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
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
#[target_feature(enable = "avx2,fma,f16c")]
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

/// Unpacks `x` (tokens of `nb` blocks) into `out`, `nb` entries per tile of tokens; the last tile is
/// padded with zero tokens.
#[target_feature(enable = "avx2,fma,f16c")]
fn pack_tokens(x: &[BlockQ8_0], nb: usize, out: &mut Vec<TokensQ8_0>) {
    pack_token_tiles::<TOKENS, _, _>((x, nb), out, |p, lane, b| {
        pack_quads(&b.qs, &mut p.qs[lane]);
        p.offsets[lane] = 8 * b.qs.iter().map(|&v| i32::from(v)).sum::<i32>();
        p.d[lane] = f16_to_f32(b.d);
    });
}

/// The results of one tile, `out[r][t]` for row `r` and token `t`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_tile(rows: &[RowsQ4_0], tokens: &[TokensQ8_0]) -> [[f32; TOKENS]; ROWS] {
    let n = rows.len().min(tokens.len());
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); TOKENS];
    for (w, y) in rows[..n].iter().zip(&tokens[..n]) {
        let mut pairs = [_mm256_setzero_si256(); TOKENS];
        for (k, quad) in w.q.iter().enumerate() {
            let q = load_u32x8(quad);
            for (t, pair) in pairs.iter_mut().enumerate() {
                let a = _mm256_set1_epi32(y.qs[t][k] as i32);
                *pair = _mm256_add_epi16(*pair, _mm256_maddubs_epi16(q, a));
            }
        }
        let d = load_f32x8(&w.d);
        for (t, acc) in acc.iter_mut().enumerate() {
            let sums = _mm256_madd_epi16(pairs[t], ones);
            let s = _mm256_sub_epi32(sums, _mm256_set1_epi32(y.offsets[t]));
            let d_xy = _mm256_mul_ps(d, _mm256_set1_ps(y.d[t]));
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d_xy, *acc);
        }
    }
    lane_results(acc)
}

/// Q4_0 rows of `w` against the tokens of `x` (`nb` blocks each) along llama.cpp's repacked Q4_0
/// GEMM, into `out` as `layout` places them, with the bits of the single-row repacked dots.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
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
