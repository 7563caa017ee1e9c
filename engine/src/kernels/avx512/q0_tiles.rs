//! Tiled Q4_0 and Q5_0 products (prefill) on the AVX-512 tier: register tiles of four weight rows by
//! four tokens, two tokens to a 512-bit vector, with the bits of the single-row dots.
//!
//! The single-row dot forms, per 32-value block, eight exact int32 lanes (`sum((x - offset) * y)` over
//! values `4l..4l + 4`) and adds them in f32 as `fma(d_x * d_y, lanes, acc)`. Here the activations are
//! packed once per call, two tokens a vector and biased to unsigned (`y + 128`), and each tile of rows
//! once, its signed values `x - offset` in both halves with the correction `-128 * sum(x - offset)` per
//! lane: `vpdpbusd` from that correction gives the same integers, and the float steps are the same,
//! lane for lane, for two (row, token) pairs at once.

use std::{arch::x86_64::*, cell::RefCell};

use super::five_bit_values;
use crate::{
    kernels::{
        tiles::{OutLayout, gemm_by_tiles, pack_token_tiles},
        x86::{bytes_from_nibbles_32, f16_to_f32, hsum_float_8},
    },
    quant::{BlockQ4_0, BlockQ5_0, BlockQ8_0},
};

/// Weight rows per tile.
const ROWS: usize = 4;
/// Pairs of tokens per tile.
const PAIRS: usize = 2;
/// Tokens per tile.
const TOKENS: usize = 2 * PAIRS;

/// One block of a tile of tokens.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct TokenPairs {
    /// Per pair: `y + 128` of its first token in bytes 0..32, of its second in 32..64.
    y: [[u8; 64]; PAIRS],
    /// Per pair: the first token's scale in lanes 0..8, the second's in 8..16.
    d: [[f32; 16]; PAIRS],
}

impl Default for TokenPairs {
    fn default() -> Self {
        Self {
            y: [[0x80; 64]; PAIRS],
            d: [[0.0; 16]; PAIRS],
        }
    }
}

/// One block of a tile of rows.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct RowsQ0 {
    /// Per row: its values less the type's offset, in both halves.
    x: [[i8; 64]; ROWS],
    /// Per row: `-128 * sum(x - offset)` over values `4l..4l + 4` in lanes `l` and `l + 8`.
    start: [[i32; 16]; ROWS],
    d: [f32; ROWS],
}

impl Default for RowsQ0 {
    fn default() -> Self {
        Self {
            x: [[0; 64]; ROWS],
            start: [[0; 16]; ROWS],
            d: [0.0; ROWS],
        }
    }
}

/// Per-thread buffers: allocated on a thread's first product, then reused.
#[derive(Default)]
struct Scratch {
    tokens: Vec<TokenPairs>,
    rows: Vec<RowsQ0>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// A 32-value weight block with one scale and values offset to be signed.
trait Q0Block {
    /// Its values less the offset, in element order.
    ///
    /// # Safety
    /// The CPU must support the tier's features.
    unsafe fn signed_values(&self) -> __m256i;
    fn d(&self) -> half::f16;
}

impl Q0Block for BlockQ4_0 {
    unsafe fn signed_values(&self) -> __m256i {
        // SAFETY: the caller's CPU has the tier's features (this function's contract).
        unsafe { _mm256_sub_epi8(bytes_from_nibbles_32(&self.qs), _mm256_set1_epi8(8)) }
    }
    fn d(&self) -> half::f16 {
        self.d
    }
}

impl Q0Block for BlockQ5_0 {
    unsafe fn signed_values(&self) -> __m256i {
        // SAFETY: as for Q4_0.
        unsafe { _mm256_sub_epi8(five_bit_values(&self.qs, self.qh), _mm256_set1_epi8(16)) }
    }
    fn d(&self) -> half::f16 {
        self.d
    }
}

/// Unpacks a tile of rows (`nb` blocks each) into `out`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack_rows<W: Q0Block>(rows: &[&[W]; ROWS], out: &mut Vec<RowsQ0>) {
    let nb = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    out.clear();
    out.resize(nb, RowsQ0::default());
    let ones = _mm512_set1_epi8(1);
    for (i, p) in out.iter_mut().enumerate() {
        for (r, row) in rows.iter().enumerate() {
            let b = &row[i];
            // SAFETY: this function's target features are the tier's.
            let x = _mm512_broadcast_i64x4(unsafe { b.signed_values() });
            let sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, x);
            let start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<7>(sums));
            // SAFETY: `p.x[r]` and `p.start[r]` are 64 writable bytes each; unaligned stores.
            unsafe {
                _mm512_storeu_si512(p.x[r].as_mut_ptr().cast(), x);
                _mm512_storeu_si512(p.start[r].as_mut_ptr().cast(), start);
            }
            p.d[r] = f16_to_f32(b.d());
        }
    }
}

/// Unpacks `x` (tokens of `nb` blocks) into `out`, `nb` entries per tile of tokens; the last tile is
/// padded with zero tokens.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack_tokens(x: &[BlockQ8_0], nb: usize, out: &mut Vec<TokenPairs>) {
    pack_token_tiles::<TOKENS, _, _>((x, nb), out, |p, lane, b| {
        let (pair, half) = (lane / 2, lane % 2);
        let biased = &mut p.y[pair][32 * half..32 * (half + 1)];
        for (u, &q) in biased.iter_mut().zip(&b.qs) {
            *u = (q as u8) ^ 0x80;
        }
        p.d[pair][8 * half..8 * (half + 1)].fill(f16_to_f32(b.d));
    });
}

/// The results of one tile: rows `rows` against one tile of tokens, `out[r][t]`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_tile(rows: &[RowsQ0], tokens: &[TokenPairs]) -> [[f32; TOKENS]; ROWS] {
    let n = rows.len().min(tokens.len());
    let mut acc = [[_mm512_setzero_ps(); PAIRS]; ROWS];
    for (w, y) in rows[..n].iter().zip(&tokens[..n]) {
        // SAFETY: every load reads 64 bytes from a field of at least that size; unaligned loads.
        let (yv, dy) = unsafe {
            (
                y.y.map(|v| _mm512_loadu_si512(v.as_ptr().cast())),
                y.d.map(|v| _mm512_loadu_ps(v.as_ptr())),
            )
        };
        for (r, row_acc) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let (x, start) = unsafe {
                (
                    _mm512_loadu_si512(w.x[r].as_ptr().cast()),
                    _mm512_loadu_si512(w.start[r].as_ptr().cast()),
                )
            };
            let dx = _mm512_set1_ps(w.d[r]);
            for ((a, &yv), &dy) in row_acc.iter_mut().zip(&yv).zip(&dy) {
                let sums = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, yv, x));
                *a = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy), sums, *a);
            }
        }
    }
    acc.map(|row| {
        let mut out = [0f32; TOKENS];
        for (p, a) in row.iter().enumerate() {
            out[2 * p] = hsum_float_8(_mm512_castps512_ps256(*a));
            let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(*a)));
            out[2 * p + 1] = hsum_float_8(high);
        }
        out
    })
}

/// Every row of `w` against every token of `x` (`nb` blocks each), into `out` as `layout` places them,
/// with the single-row dots' bits. A tile of rows goes across every tile of tokens before the next.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemm<W: Q0Block>(w: &[W], x: &[BlockQ8_0], nb: usize, out: &mut [f32], layout: OutLayout) {
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

tiled_products! {
    gemm_q4_0_q8_0: vec_dot_q4_0_q8_0, BlockQ4_0, BlockQ8_0;
    gemm_q5_0_q8_0: vec_dot_q5_0_q8_0, BlockQ5_0, BlockQ8_0;
}
