//! K-quant products of many tokens on the AVX-512 tier, one weight row per int32 lane, as ggml's
//! interleaved `q4_Kx8` layout does on eight lanes.
//!
//! A call unpacks each tile of sixteen rows once into [`RowsLanes`]: per four values, a vector whose
//! lane `r` holds row `r`'s four values as unsigned bytes (Q5_K's fifth and Q6_K's high bits in).
//! One `vpdpbusd` against four of a token's activations, broadcast to every lane, then adds four
//! products to each of the sixteen rows' sums, so a row's sums never leave their lane: no reduction
//! across lanes, where a row-per-vector tile spends most of its instructions. Per span of one scale
//! (32 values, Q6_K 16) the products are scaled by `vpmulld`; Q4_K/Q5_K's minimums times the
//! activation sums and Q6_K's `-32` offsets are `vpdpwssd`s of i16 pairs. The float steps are those of
//! the kernel llama.cpp takes for the matrix ([`Steps`]), so each result has the single-row dot's
//! bits.

use std::{arch::x86_64::*, cell::RefCell};

use super::{
    for_k4_values, load_f16x16, load_f32x16, load_i32x16, load_u8x64, load_u32x16,
    q4_k_x16::{GroupScales, ZERO_BYTE, group_scales, nibbles, pick_bytes},
    q6_k_values_128, q6_k_x16,
};
use crate::{
    kernels::{
        tiles::{
            OutLayout, gemm_by_groups, gemm_by_tiles, i16_pair, pack_quads, pack_token_tiles,
            q8k_pair_sums,
        },
        x86::{self, f16_to_f32},
    },
    quant::{
        BlockQ4K, BlockQ4Kx16, BlockQ5K, BlockQ6K, BlockQ6Kx16, BlockQ8K, INTERLEAVED_ROWS, QK_K,
    },
};

/// Weight rows per tile: one per int32 lane of a vector.
pub(super) const ROWS: usize = 16;
/// Tokens per tile.
const TOKENS: usize = 8;
/// Four-value quads per super-block.
const QUADS: usize = QK_K / 4;
/// 64-value groups per super-block.
const GROUPS: usize = QK_K / 64;
/// 16-value spans per super-block (Q6_K's scales).
const SIXTEENS: usize = QK_K / 16;

/// Which of llama.cpp's kernels a product follows: where the exact integers become floats.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Steps {
    /// The repacked Q4_K GEMM: per 64 values, `acc = fma(S1, d dy, acc)` and
    /// `acc_m = fma(S2, dmin dy, acc_m)`; `acc - acc_m` at the end.
    RepackedGemm,
    /// The tiled product: per super-block, `r = fma(-dmin, S2, S1 d)` (Q6_K: `S1 d`) and
    /// `acc = fma(r, dy, acc)`.
    Tiled,
}

/// One super-block of a tile of rows, a row per lane.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct RowsLanes {
    /// `q[k]`, lane `r`: values `4k..4k + 4` of row `r`, a byte each.
    q: [[u32; ROWS]; QUADS],
    /// `scales[j]`, lane `r`: the scale of row `r`'s `j`-th span (32 values; Q6_K 16).
    scales: [[i32; ROWS]; SIXTEENS],
    /// `pairs[g]`, lane `r`, two i16: Q4_K/Q5_K the minimums of row `r`'s 32-value sub-blocks `2g` and
    /// `2g + 1`; Q6_K (eight of them) the scales of its 16-value spans `2g` and `2g + 1`.
    pairs: [[u32; ROWS]; SIXTEENS / 2],
    d: [f32; ROWS],
    dmin: [f32; ROWS],
}

impl Default for RowsLanes {
    fn default() -> Self {
        Self {
            q: [[0; ROWS]; QUADS],
            scales: [[0; ROWS]; SIXTEENS],
            pairs: [[0; ROWS]; SIXTEENS / 2],
            d: [0.0; ROWS],
            dmin: [0.0; ROWS],
        }
    }
}

/// One super-block of a tile of tokens.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct TokensLanes {
    /// Per token, its 256 activations four to a word.
    qs: [[u32; QUADS]; TOKENS],
    /// Per token and group `g`: the sums of its 32-value sub-blocks `2g` and `2g + 1`, an i16 each.
    sub_sums: [[u32; GROUPS]; TOKENS],
    /// Per token and `m`: the sums of its 16-value spans `2m` and `2m + 1`, an i16 each.
    bsums: [[u32; SIXTEENS / 2]; TOKENS],
    d: [f32; TOKENS],
}

impl Default for TokensLanes {
    fn default() -> Self {
        Self {
            qs: [[0; QUADS]; TOKENS],
            sub_sums: [[0; GROUPS]; TOKENS],
            bsums: [[0; SIXTEENS / 2]; TOKENS],
            d: [0.0; TOKENS],
        }
    }
}

/// Per-thread buffers: allocated on a thread's first product, then reused.
#[derive(Default)]
struct Scratch {
    tokens: Vec<TokensLanes>,
    rows: Vec<RowsLanes>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// A K-quant weight block as the lane kernel reads it.
trait LaneBlock {
    /// Values per scale: 32, or Q6_K's 16.
    const SPAN: usize;
    /// Whether the type has minimums (Q4_K, Q5_K) or Q6_K's `-32` offset.
    const MINIMUMS: bool;
    /// Unpacks one block: its values in natural order into `values`, the rest into lane `r` of
    /// `out`.
    ///
    /// # Safety
    /// The CPU must support the tier's features.
    unsafe fn unpack(&self, values: &mut [[u8; 64]; GROUPS], out: &mut RowsLanes, r: usize);
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn store_u8x64(out: &mut [u8; 64], v: __m512i) {
    // SAFETY: `out` is 64 writable bytes; `storeu` has no alignment requirement.
    unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), v) }
}

/// The values of a Q4_K/Q5_K block in natural order, as the single-row dot forms them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn k4_values(qs: &[u8; QK_K / 2], qh: Option<&[u8; QK_K / 8]>, out: &mut [[u8; 64]; GROUPS]) {
    for_k4_values(qs, qh, |g, q| store_u8x64(&mut out[g], q));
}

/// The unsigned 6-bit values of a Q6_K block in natural order, as the single-row dot forms them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q6_k_values(x: &BlockQ6K, out: &mut [[u8; 64]; GROUPS]) {
    for (j, pair) in out.as_chunks_mut::<2>().0.iter_mut().enumerate() {
        let [first, second] = q6_k_values_128(x, j);
        store_u8x64(&mut pair[0], first);
        store_u8x64(&mut pair[1], second);
    }
}

/// A tile's values in natural order, a row per entry, before they are spread a row per lane.
type TileValues = [[[u8; 64]; GROUPS]; ROWS];

/// `out.q` from the tile's values: `q[k]`, lane `r`, is row `r`'s `k`-th word, each 64-value group
/// a 16 x 16 word transpose.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn spread_values(values: &TileValues, out: &mut RowsLanes) {
    for (g, quads) in out.q.chunks_exact_mut(16).enumerate() {
        let rows: [__m512i; ROWS] = std::array::from_fn(|r| load_u8x64(&values[r][g]));
        for (q, words) in quads.iter_mut().zip(transpose_16x16(rows)) {
            // SAFETY: `q` is 64 writable bytes; unaligned store.
            unsafe { _mm512_storeu_si512(q.as_mut_ptr().cast(), words) };
        }
    }
}

/// The transpose of 16 vectors of 16 words: word `w` of vector `r` goes to word `r` of vector `w`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn transpose_16x16(r: [__m512i; 16]) -> [__m512i; 16] {
    // Per 128-bit quarter q: pairs of rows interleaved, then quads, so that `quads[4i + j]` holds, in
    // quarter q, word 4q + j of rows 4i..4i + 4.
    let pairs: [__m512i; 16] = std::array::from_fn(|k| {
        let (a, b) = (r[k & !1], r[k | 1]);
        if k % 2 == 0 {
            _mm512_unpacklo_epi32(a, b)
        } else {
            _mm512_unpackhi_epi32(a, b)
        }
    });
    let quads: [__m512i; 16] = std::array::from_fn(|k| {
        let (i, j) = (k / 4, k % 4);
        let (a, b) = (pairs[4 * i + j / 2], pairs[4 * i + j / 2 + 2]);
        if j % 2 == 0 {
            _mm512_unpacklo_epi64(a, b)
        } else {
            _mm512_unpackhi_epi64(a, b)
        }
    });
    // Word 4q + j of every row: quarter q of quads j, 4 + j, 8 + j, 12 + j.
    let mut out = [_mm512_setzero_si512(); 16];
    for j in 0..4 {
        let low01 = _mm512_shuffle_i32x4::<0x44>(quads[j], quads[4 + j]);
        let low23 = _mm512_shuffle_i32x4::<0xee>(quads[j], quads[4 + j]);
        let high01 = _mm512_shuffle_i32x4::<0x44>(quads[8 + j], quads[12 + j]);
        let high23 = _mm512_shuffle_i32x4::<0xee>(quads[8 + j], quads[12 + j]);
        out[j] = _mm512_shuffle_i32x4::<0x88>(low01, high01);
        out[4 + j] = _mm512_shuffle_i32x4::<0xdd>(low01, high01);
        out[8 + j] = _mm512_shuffle_i32x4::<0x88>(low23, high23);
        out[12 + j] = _mm512_shuffle_i32x4::<0xdd>(low23, high23);
    }
    out
}

/// Unpacks a Q4_K/Q5_K block's values and scales into lane `r` of `out`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_k4(
    (d, dmin, packed): (half::f16, half::f16, &[u8; 12]),
    (qs, qh): (&[u8; QK_K / 2], Option<&[u8; QK_K / 8]>),
    (values, out): (&mut [[u8; 64]; GROUPS], &mut RowsLanes),
    r: usize,
) {
    k4_values(qs, qh, values);
    let (scales, mins) = x86::scales_mins_k4(packed);
    let [scales, mins] = [scales, mins].map(u64::to_le_bytes);
    for (j, &scale) in scales.iter().enumerate() {
        out.scales[j][r] = i32::from(scale);
    }
    for (g, m) in mins.as_chunks::<2>().0.iter().enumerate() {
        out.pairs[g][r] = i16_pair(i16::from(m[0]), i16::from(m[1]));
    }
    out.d[r] = f16_to_f32(d);
    out.dmin[r] = f16_to_f32(dmin);
}

impl LaneBlock for BlockQ4K {
    const SPAN: usize = 32;
    const MINIMUMS: bool = true;
    unsafe fn unpack(&self, values: &mut [[u8; 64]; GROUPS], out: &mut RowsLanes, r: usize) {
        let parts = (self.d, self.dmin, &self.scales);
        // SAFETY: the caller's CPU has the tier's features (this function's contract).
        unsafe { unpack_k4(parts, (&self.qs, None), (values, out), r) }
    }
}

impl LaneBlock for BlockQ5K {
    const SPAN: usize = 32;
    const MINIMUMS: bool = true;
    unsafe fn unpack(&self, values: &mut [[u8; 64]; GROUPS], out: &mut RowsLanes, r: usize) {
        let parts = (self.d, self.dmin, &self.scales);
        // SAFETY: as for Q4_K.
        unsafe { unpack_k4(parts, (&self.qs, Some(&self.qh)), (values, out), r) }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_q6_k(x: &BlockQ6K, values: &mut [[u8; 64]; GROUPS], out: &mut RowsLanes, r: usize) {
    q6_k_values(x, values);
    for (j, &scale) in x.scales.iter().enumerate() {
        out.scales[j][r] = i32::from(scale);
    }
    for (m, pair) in x.scales.as_chunks::<2>().0.iter().enumerate() {
        out.pairs[m][r] = i16_pair(i16::from(pair[0]), i16::from(pair[1]));
    }
    out.d[r] = f16_to_f32(x.d);
}

impl LaneBlock for BlockQ6K {
    const SPAN: usize = 16;
    const MINIMUMS: bool = false;
    unsafe fn unpack(&self, values: &mut [[u8; 64]; GROUPS], out: &mut RowsLanes, r: usize) {
        // SAFETY: as for Q4_K.
        unsafe { unpack_q6_k(self, values, out, r) }
    }
}

/// Unpacks a tile of rows (`nb` super-blocks each) into `out`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack_rows<W: LaneBlock>(rows: &[&[W]; ROWS], out: &mut Vec<RowsLanes>) {
    let nb = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    out.clear();
    out.resize(nb, RowsLanes::default());
    let mut values: TileValues = [[[0; 64]; GROUPS]; ROWS];
    for (i, p) in out.iter_mut().enumerate() {
        for (r, (row, values)) in rows.iter().zip(&mut values).enumerate() {
            // SAFETY: this function's target features are the tier's.
            unsafe { row[i].unpack(values, p, r) };
        }
        spread_values(&values, p);
    }
}

/// Stores sixteen lanes, one row's four bytes each.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn store_lanes<T>(lanes: &mut [T; ROWS], v: __m512i) {
    const { assert!(size_of::<T>() == 4) };
    // SAFETY: `lanes` is 64 writable bytes (sixteen of four); unaligned store.
    unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), v) }
}

/// Unpacks a group of sixteen interleaved Q4_K rows into `out`, an entry per super-block: their
/// words are already a row's four bytes each, so each is split into its nibbles, no transpose.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack_group_q4_k(group: &[BlockQ4Kx16], out: &mut Vec<RowsLanes>) {
    const { assert!(ROWS == INTERLEAVED_ROWS) };
    out.clear();
    out.resize(group.len(), RowsLanes::default());
    for (block, p) in group.iter().zip(out.iter_mut()) {
        for j in 0..GROUPS {
            for m in 0..8 {
                let (low, high) = nibbles(block, 8 * j + m);
                store_lanes(&mut p.q[16 * j + m], low);
                store_lanes(&mut p.q[16 * j + 8 + m], high);
            }
        }
        let GroupScales { scales, mins } = group_scales(block);
        for (lanes, v) in p.scales.iter_mut().zip(scales) {
            store_lanes(lanes, v);
        }
        for (lanes, v) in p.pairs.iter_mut().zip(mins) {
            store_lanes(lanes, v);
        }
        // SAFETY: `d` and `dmin` are 16 writable f32 each; unaligned stores.
        unsafe {
            _mm512_storeu_ps(p.d.as_mut_ptr(), load_f16x16(&block.d));
            _mm512_storeu_ps(p.dmin.as_mut_ptr(), load_f16x16(&block.dmin));
        }
    }
}

/// Unpacks a group of sixteen interleaved Q6_K rows into `out`, an entry per super-block: each word
/// of high bits with its two words of low bits gives four words of values, no transpose.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack_group_q6_k(group: &[BlockQ6Kx16], out: &mut Vec<RowsLanes>) {
    const { assert!(ROWS == INTERLEAVED_ROWS) };
    const ZERO: u8 = ZERO_BYTE;
    out.clear();
    out.resize(group.len(), RowsLanes::default());
    for (block, p) in group.iter().zip(out.iter_mut()) {
        for m in 0..QK_K / 16 {
            let (n, q) = (m / 8, m % 8);
            for (c, v) in q6_k_x16::values(block, m).into_iter().enumerate() {
                store_lanes(&mut p.q[32 * n + 8 * c + q], v);
            }
        }
        let words = block.scales.each_ref().map(|w| load_u8x64(w));
        for (j, lanes) in p.scales.iter_mut().enumerate() {
            let k = (j % 4) as u8;
            let byte = pick_bytes(words[j / 4], [ZERO, ZERO, ZERO, k]);
            store_lanes(lanes, _mm512_srai_epi32::<24>(byte));
        }
        for (m, lanes) in p.pairs.iter_mut().enumerate() {
            let k = (2 * m % 4) as u8;
            let bytes = pick_bytes(words[m / 2], [ZERO, k, ZERO, k + 1]);
            store_lanes(lanes, _mm512_srai_epi16::<8>(bytes));
        }
        // SAFETY: `d` is 16 writable f32; unaligned store.
        unsafe { _mm512_storeu_ps(p.d.as_mut_ptr(), load_f16x16(&block.d)) };
    }
}

/// Unpacks `x` (tokens of `nb` super-blocks) into `out`, `nb` entries per tile of tokens; the last
/// tile is padded with zero tokens.
fn pack_tokens(x: &[BlockQ8K], nb: usize, out: &mut Vec<TokensLanes>) {
    pack_token_tiles::<TOKENS, _, _>((x, nb), out, |p, lane, b| {
        pack_quads(&b.qs, &mut p.qs[lane]);
        (p.sub_sums[lane], p.bsums[lane]) = q8k_pair_sums(b);
        p.d[lane] = b.d;
    });
}

/// Adds to `s1`, per token of the tile, lane `r`: row `r`'s scaled products with the token's
/// activations over the spans `spans` of `span` values.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn add_scaled_products(
    w: &RowsLanes,
    y: &TokensLanes,
    (span, spans): (usize, std::ops::Range<usize>),
    s1: &mut [__m512i; TOKENS],
) {
    let quads = span / 4;
    for j in spans {
        let mut p = [_mm512_setzero_si512(); TOKENS];
        for k in quads * j..quads * (j + 1) {
            let q = load_u32x16(&w.q[k]);
            for (t, sum) in p.iter_mut().enumerate() {
                let a = _mm512_set1_epi32(y.qs[t][k] as i32);
                *sum = _mm512_dpbusd_epi32(*sum, q, a);
            }
        }
        let scale = load_i32x16(&w.scales[j]);
        for (sum, p) in s1.iter_mut().zip(p) {
            *sum = _mm512_add_epi32(*sum, _mm512_mullo_epi32(p, scale));
        }
    }
}

/// Per token, lane `r`: `S2` of row `r` (Q4_K/Q5_K's minimums times the activation sums) over the
/// 64-value groups `groups`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn minimum_products(
    w: &RowsLanes,
    y: &TokensLanes,
    groups: std::ops::Range<usize>,
) -> [__m512i; TOKENS] {
    let mut s2 = [_mm512_setzero_si512(); TOKENS];
    for g in groups {
        let mins = load_u32x16(&w.pairs[g]);
        for (t, s2) in s2.iter_mut().enumerate() {
            let sums = _mm512_set1_epi32(y.sub_sums[t][g] as i32);
            *s2 = _mm512_dpwssd_epi32(*s2, mins, sums);
        }
    }
    s2
}

/// Per token, lane `r`: Q6_K's offset of row `r`, `32 sum(scale * 16-value activation sum)`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q6_k_offsets(w: &RowsLanes, y: &TokensLanes) -> [__m512i; TOKENS] {
    let mut offsets = [_mm512_setzero_si512(); TOKENS];
    for (m, pair) in w.pairs.iter().enumerate() {
        let scales = load_u32x16(pair);
        for (t, offset) in offsets.iter_mut().enumerate() {
            let sums = _mm512_set1_epi32(y.bsums[t][m] as i32);
            *offset = _mm512_dpwssd_epi32(*offset, scales, sums);
        }
    }
    offsets.map(|o| _mm512_slli_epi32::<5>(o))
}

/// Per token, lane `r`: row `r`'s dot along the repacked GEMM's steps (Q4_K).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn gemm_sums<W: LaneBlock>(rows: &[RowsLanes], tokens: &[TokensLanes]) -> [__m512; TOKENS] {
    let mut acc = [_mm512_setzero_ps(); TOKENS];
    for (w, y) in rows.iter().zip(tokens) {
        let d = load_f32x16(&w.d);
        for g in 0..GROUPS {
            let mut s1 = [_mm512_setzero_si512(); TOKENS];
            add_scaled_products(w, y, (32, 2 * g..2 * g + 2), &mut s1);
            for (t, acc) in acc.iter_mut().enumerate() {
                let d_dy = _mm512_mul_ps(d, _mm512_set1_ps(y.d[t]));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1[t]), d_dy, *acc);
            }
        }
    }
    let mut acc_m = [_mm512_setzero_ps(); TOKENS];
    for (w, y) in rows.iter().zip(tokens) {
        let dmin = load_f32x16(&w.dmin);
        for g in 0..GROUPS {
            let s2 = minimum_products(w, y, g..g + 1);
            for (t, acc) in acc_m.iter_mut().enumerate() {
                let dmin_dy = _mm512_mul_ps(dmin, _mm512_set1_ps(y.d[t]));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s2[t]), dmin_dy, *acc);
            }
        }
    }
    std::array::from_fn(|t| _mm512_sub_ps(acc[t], acc_m[t]))
}

/// Per token, lane `r`: row `r`'s dot along the tiled product's steps.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn tiled_sums<W: LaneBlock>(rows: &[RowsLanes], tokens: &[TokensLanes]) -> [__m512; TOKENS] {
    let mut acc = [_mm512_setzero_ps(); TOKENS];
    for (w, y) in rows.iter().zip(tokens) {
        let mut s1 = [_mm512_setzero_si512(); TOKENS];
        add_scaled_products(w, y, (W::SPAN, 0..QK_K / W::SPAN), &mut s1);
        if !W::MINIMUMS {
            for (s1, offset) in s1.iter_mut().zip(q6_k_offsets(w, y)) {
                *s1 = _mm512_sub_epi32(*s1, offset);
            }
        }
        let d = load_f32x16(&w.d);
        let mut result: [__m512; TOKENS] =
            std::array::from_fn(|t| _mm512_mul_ps(_mm512_cvtepi32_ps(s1[t]), d));
        if W::MINIMUMS {
            let s2 = minimum_products(w, y, 0..GROUPS);
            let dmin = load_f32x16(&w.dmin);
            for (r, s2) in result.iter_mut().zip(s2) {
                *r = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(s2), *r);
            }
        }
        for (t, acc) in acc.iter_mut().enumerate() {
            *acc = _mm512_fmadd_ps(result[t], _mm512_set1_ps(y.d[t]), *acc);
        }
    }
    acc
}

/// The results of one tile, `out[r][t]` for row `r` and token `t`, along `steps`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_tile<W: LaneBlock>(
    rows: &[RowsLanes],
    tokens: &[TokensLanes],
    steps: Steps,
) -> [[f32; TOKENS]; ROWS] {
    let n = rows.len().min(tokens.len());
    let (rows, tokens) = (&rows[..n], &tokens[..n]);
    let sums = match steps {
        Steps::RepackedGemm => gemm_sums::<W>(rows, tokens),
        Steps::Tiled => tiled_sums::<W>(rows, tokens),
    };
    tile_results(sums)
}

/// A tile's results by row and token from its per-token vectors, a row per lane.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn tile_results<const T: usize>(sums: [__m512; T]) -> [[f32; T]; ROWS] {
    let mut lanes = [[0f32; ROWS]; T];
    for (lane, sum) in lanes.iter_mut().zip(sums) {
        // SAFETY: `lane` has room for 16 f32; unaligned store.
        unsafe { _mm512_storeu_ps(lane.as_mut_ptr(), sum) };
    }
    std::array::from_fn(|r| std::array::from_fn(|t| lanes[t][r]))
}

/// Every row of `w` against every token of `x` (`nb` super-blocks each) along `steps`, into `out`
/// as `layout` places them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemm<W: LaneBlock>(
    (w, x, nb): (&[W], &[BlockQ8K], usize),
    (out, layout): (&mut [f32], OutLayout),
    steps: Steps,
) {
    SCRATCH.with_borrow_mut(|s| {
        gemm_by_tiles(
            (w, x, nb),
            (out, layout),
            (&mut s.tokens, &mut s.rows),
            pack_tokens,
            |tile, out| pack_rows(tile, out),
            |rows, tokens| dot_tile::<W>(rows, tokens, steps),
        );
    });
}

/// [`gemm`] of rows interleaved sixteen at a time (`w`: groups of `nb` super-blocks of `W`'s rows),
/// each group unpacked by `pack_group`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemm_groups<W: LaneBlock, G>(
    (w, x, nb): (&[G], &[BlockQ8K], usize),
    (out, layout): (&mut [f32], OutLayout),
    pack_group: unsafe fn(&[G], &mut Vec<RowsLanes>),
    steps: Steps,
) {
    SCRATCH.with_borrow_mut(|s| {
        gemm_by_groups(
            (w, x, nb),
            (out, layout),
            (&mut s.tokens, &mut s.rows),
            pack_tokens,
            // SAFETY: this function's target features are the tier's.
            |group, buf| unsafe { pack_group(group, buf) },
            |rows, tokens| dot_tile::<W>(rows, tokens, steps),
        );
    });
}

/// Q4_K rows of `w` against the tokens of `x` (`nb` super-blocks each) along llama.cpp's repacked
/// GEMM ([`KPath::RepackedGemm`](crate::kernels::k_numerics::KPath::RepackedGemm)), into `out` as
/// `layout` places them, with the bits of the single-row dots along that path.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](crate::kernels::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn gemm_q4_k_q8_k_repacked(
    w: &[BlockQ4K],
    x: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm((w, x, nb), (out, layout), Steps::RepackedGemm);
}

/// [`gemm_q4_k_q8_k_repacked`] of Q4_K rows interleaved sixteen at a time (`w`: groups of `nb`
/// super-blocks), with the same bits.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](crate::kernels::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn gemm_q4_k_x16_q8_k_repacked(
    w: &[BlockQ4Kx16],
    x: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm_groups::<BlockQ4K, _>(
        (w, x, nb),
        (out, layout),
        pack_group_q4_k,
        Steps::RepackedGemm,
    );
}

/// [`gemm_q6_k_q8_k`] of Q6_K rows interleaved sixteen at a time (`w`: groups of `nb` super-blocks),
/// with the same bits.
///
/// # Safety
/// The CPU must support the [`KernelTier::Avx512`](crate::kernels::cpu::KernelTier::Avx512) features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn gemm_q6_k_x16_q8_k(
    w: &[BlockQ6Kx16],
    x: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm_groups::<BlockQ6K, _>((w, x, nb), (out, layout), pack_group_q6_k, Steps::Tiled);
}

/// Defines a tiled K-quant product along llama.cpp's tiled product
/// ([`KPath::Tiled`](crate::kernels::k_numerics::KPath::Tiled)).
macro_rules! lane_products {
    ($($name:ident: $w:ty;)*) => {$(
        /// Every row of `w` against every token of `x` (`nb` super-blocks each) along llama.cpp's
        /// tiled product, into `out` as `layout` places them, with the single-row dots' bits.
        ///
        /// # Safety
        /// The CPU must support the [`KernelTier::Avx512`](crate::kernels::cpu::KernelTier::Avx512)
        /// features.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(crate) unsafe fn $name(
            w: &[$w],
            x: &[BlockQ8K],
            nb: usize,
            out: &mut [f32],
            layout: OutLayout,
        ) {
            gemm((w, x, nb), (out, layout), Steps::Tiled);
        }
    )*};
}

lane_products! {
    gemm_q4_k_q8_k: BlockQ4K;
    gemm_q5_k_q8_k: BlockQ5K;
    gemm_q6_k_q8_k: BlockQ6K;
}
