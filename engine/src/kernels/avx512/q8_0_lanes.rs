//! Q8_0 products of many tokens on the AVX-512 tier, one weight row per int32 lane, with the bits of
//! ggml's eight-lane Q8_0 dot.
//!
//! ggml's Q8_0 dot (and llama.cpp's tiled product, which follows it) keeps, per (row, token), eight
//! float accumulators: per block, lane `l` takes the exact sum of the four products of values
//! `4l..4l + 4` as `acc_l = fma(d_x d_y, sum_l, acc_l)`, and the eight lanes are added at the end.
//! Here a vector holds those sums for sixteen rows at once. A call unpacks each tile of sixteen rows
//! once into [`RowsQ8_0`] (16 x 16 word transposes, as in [`k_lanes`](super::k_lanes)): per four
//! values, a vector whose lane `r` holds row `r`'s four values, and
//! the correction `-128 * sum` of those values. One `vpdpbusd` from that correction, against four of
//! a token's activations biased to unsigned (`y + 128`) and broadcast to every lane, gives `sum_l` for
//! all sixteen rows; one multiply gives all sixteen `d_x d_y`. So per (row, token, block) there is no
//! scale product of its own and no reduction across lanes, where a row-per-vector tile spends most of
//! its instructions.
//!
//! The tile of rows is walked in chunks of [`CHUNK`] blocks, which stay in the first-level cache while
//! every pair of tokens passes over them; each pair's accumulators wait in memory between chunks.
//! Every lane still takes its blocks in order, so the bits are the single-row dot's.

use std::{arch::x86_64::*, cell::RefCell};

use super::{
    k_lanes::{ROWS, transpose_16x16},
    load_f16x16, load_f32x16, load_i32x16, load_u8x64, load_u32x16,
};
use crate::{
    kernels::{
        tiles::{OutLayout, product_shape, store_tile, tile_rows},
        x86::{f16_to_f32, load_i8x32},
    },
    quant::{BlockQ8_0, BlockQ8_0x16, QK},
};

/// Four-value quads per block: ggml's eight lanes.
const QUADS: usize = QK / 4;
/// Tokens whose accumulators are held in registers together (8 vectors each).
const PAIR: usize = 2;
/// Blocks of a tile of rows walked by every pair of tokens before the next (17 KiB of rows).
const CHUNK: usize = 16;

/// One block of a tile of rows, a row per lane.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct RowsQ8_0 {
    /// `x[l]`, lane `r`: values `4l..4l + 4` of row `r`, a signed byte each.
    x: [[u32; ROWS]; QUADS],
    /// `start[l]`, lane `r`: `-128` times the sum of those four values.
    start: [[i32; ROWS]; QUADS],
    d: [f32; ROWS],
}

/// One block of one token.
#[derive(Clone, Copy)]
struct TokenQ8_0 {
    /// Its 32 activations plus 128, four unsigned bytes to a word.
    y: [u32; QUADS],
    d: f32,
}

/// A zero token, which pads a pair.
const ZERO_TOKEN: TokenQ8_0 = TokenQ8_0 {
    y: [0x8080_8080; QUADS],
    d: 0.0,
};

/// A token's eight lane accumulators, a row per lane.
type Lanes = [__m512; QUADS];

/// Per-thread buffers: allocated on a thread's first product, then reused.
#[derive(Default)]
struct Scratch {
    tokens: Vec<TokenQ8_0>,
    rows: Vec<RowsQ8_0>,
    acc: Vec<Lanes>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Stores `x` (lane `r`: values `4l..4l + 4` of row `r`) as `p.x[l]`, with its correction.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn store_quad(p: &mut RowsQ8_0, l: usize, x: __m512i) {
    let sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), x);
    let start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<7>(sums));
    // SAFETY: `p.x[l]` and `p.start[l]` are 64 writable bytes each; unaligned stores.
    unsafe {
        _mm512_storeu_si512(p.x[l].as_mut_ptr().cast(), x);
        _mm512_storeu_si512(p.start[l].as_mut_ptr().cast(), start);
    }
}

/// Unpacks a group of sixteen interleaved rows into `out`, a block each: its words are already a
/// row per lane, so there is nothing to transpose.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack_group(group: &[BlockQ8_0x16], out: &mut Vec<RowsQ8_0>) {
    out.clear();
    out.resize(group.len(), RowsQ8_0::default());
    for (block, p) in group.iter().zip(out.iter_mut()) {
        for (l, words) in block.qs.iter().enumerate() {
            store_quad(p, l, load_u8x64(words));
        }
        // SAFETY: `p.d` is 16 writable f32; unaligned store.
        unsafe { _mm512_storeu_ps(p.d.as_mut_ptr(), load_f16x16(&block.d)) };
    }
}

/// Unpacks a tile of rows (`nb` blocks each) into `out`, two blocks at a time: per row, the values
/// of both in one vector, and a 16 x 16 word transpose spreads them a row per lane.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack_rows(rows: &[&[BlockQ8_0]; ROWS], out: &mut Vec<RowsQ8_0>) {
    let nb = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    out.clear();
    out.resize(nb, RowsQ8_0::default());
    for (pair, blocks) in out.chunks_mut(2).enumerate() {
        let (i, j) = (2 * pair, (2 * pair + 1).min(nb - 1));
        let values: [__m512i; ROWS] = std::array::from_fn(|r| {
            let (first, second) = (load_i8x32(&rows[r][i].qs), load_i8x32(&rows[r][j].qs));
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(first), second)
        });
        let words = transpose_16x16(values);
        for (half, p) in blocks.iter_mut().enumerate() {
            for (l, &x) in words[QUADS * half..QUADS * (half + 1)].iter().enumerate() {
                store_quad(p, l, x);
            }
            let block = i + half;
            for (r, row) in rows.iter().enumerate() {
                p.d[r] = f16_to_f32(row[block].d);
            }
        }
    }
}

/// Unpacks `x` (tokens of `nb` blocks) into `out`, token-major, padded to whole pairs with a zero
/// token.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack_tokens(x: &[BlockQ8_0], nb: usize, out: &mut Vec<TokenQ8_0>) {
    let tokens = x.len() / nb;
    out.clear();
    out.extend(x.iter().map(|b| TokenQ8_0 {
        y: std::array::from_fn(|l| {
            u32::from_le_bytes(std::array::from_fn(|k| (b.qs[4 * l + k] as u8) ^ 0x80))
        }),
        d: f16_to_f32(b.d),
    }));
    out.resize(tokens.next_multiple_of(PAIR) * nb, ZERO_TOKEN);
}

/// Adds blocks `rows` of a tile of rows, against the same blocks of two tokens, into their
/// accumulators.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn add_chunk(rows: &[RowsQ8_0], tokens: [&[TokenQ8_0]; PAIR], sums: &mut [Lanes; PAIR]) {
    // A local copy, so that the accumulators stay in registers across the blocks.
    let mut acc = *sums;
    for (i, w) in rows.iter().enumerate() {
        let y = tokens.map(|t| &t[i]);
        let dx = load_f32x16(&w.d);
        let d_xy = y.map(|y| _mm512_mul_ps(dx, _mm512_set1_ps(y.d)));
        for (l, (x, start)) in w.x.iter().zip(&w.start).enumerate() {
            let (x, start) = (load_u32x16(x), load_i32x16(start));
            for ((lanes, y), &d_xy) in acc.iter_mut().zip(y).zip(&d_xy) {
                let ybias = _mm512_set1_epi32(y.y[l] as i32);
                let sums = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, ybias, x));
                lanes[l] = _mm512_fmadd_ps(d_xy, sums, lanes[l]);
            }
        }
    }
    *sums = acc;
}

/// A token's results for the tile's rows: its eight lanes added as ggml's `hsum_float_8` adds them,
/// `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn lane_totals(acc: &Lanes) -> [f32; ROWS] {
    let v: [__m512; 4] = std::array::from_fn(|i| _mm512_add_ps(acc[i], acc[i + 4]));
    let total = _mm512_add_ps(_mm512_add_ps(v[0], v[2]), _mm512_add_ps(v[1], v[3]));
    let mut out = [0f32; ROWS];
    // SAFETY: `out` has room for 16 f32; unaligned store.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), total) };
    out
}

/// Every tile of sixteen rows (`rows` of them, each unpacked by `pack_tile` from its first row)
/// against every token of `x` (`nb` blocks each), into `out` as `layout` places them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemm(
    (rows, x, nb): (usize, &[BlockQ8_0], usize),
    (out, layout): (&mut [f32], OutLayout),
    mut pack_tile: impl FnMut(usize, &mut Vec<RowsQ8_0>),
) {
    let tokens = x.len().checked_div(nb).unwrap_or(0);
    if rows == 0 || tokens == 0 {
        return;
    }
    SCRATCH.with_borrow_mut(|s| {
        pack_tokens(x, nb, &mut s.tokens);
        let padded = tokens.next_multiple_of(PAIR);
        for first_row in (0..rows).step_by(ROWS) {
            pack_tile(first_row, &mut s.rows);
            s.acc.clear();
            s.acc.resize(padded, [_mm512_setzero_ps(); QUADS]);
            for first in (0..nb).step_by(CHUNK) {
                let blocks = first..(first + CHUNK).min(nb);
                for (p, acc) in s.acc.as_chunks_mut::<PAIR>().0.iter_mut().enumerate() {
                    let tokens =
                        std::array::from_fn(|t| &s.tokens[(PAIR * p + t) * nb..][blocks.clone()]);
                    add_chunk(&s.rows[blocks.clone()], tokens, acc);
                }
            }
            let real_rows = rows - first_row;
            for (t, acc) in s.acc[..tokens].iter().enumerate() {
                let values = lane_totals(acc).map(|v| [v]);
                store_tile::<ROWS, 1>(out, layout, (first_row, t), (real_rows, 1), values);
            }
        }
    });
}

/// Every row of `w` against every token of `x` (`nb` blocks each), into `out` as `layout` places them,
/// with the bits of the single-row Q8_0 dot.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](crate::kernels::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn gemm_q8_0_q8_0(
    w: &[BlockQ8_0],
    x: &[BlockQ8_0],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    let Some((rows, _)) = product_shape(w, x, nb) else {
        return;
    };
    gemm((rows, x, nb), (out, layout), |first_row, buf| {
        pack_rows(&tile_rows::<ROWS, _>(w, nb, first_row), buf);
    });
}

/// [`gemm_q8_0_q8_0`] of Q8_0 rows interleaved sixteen at a time (`w`: groups of `nb` blocks), with
/// the same bits.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](crate::kernels::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn gemm_q8_0_x16_q8_0(
    w: &[BlockQ8_0x16],
    x: &[BlockQ8_0],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    let rows = w.len().checked_div(nb).unwrap_or(0) * ROWS;
    gemm((rows, x, nb), (out, layout), |first_row, buf| {
        pack_group(&w[first_row / ROWS * nb..][..nb], buf);
    });
}
