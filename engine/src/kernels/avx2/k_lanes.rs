//! K-quant products of many tokens on the AVX2 tier, one weight row per int32 lane, as ggml's
//! interleaved `q4_Kx8` layout has it.
//!
//! A call unpacks each tile of eight rows once into [`RowsLanes`]: per four values, a vector whose
//! lane `r` holds row `r`'s four values as unsigned bytes (Q5_K's fifth and Q6_K's high bits in).
//! `vpmaddubsw` against four of a token's activations, broadcast to every lane, gives each row two
//! i16 sums of two products; those of a span of one scale add up in i16 as far as they cannot
//! overflow ([`LaneBlock::I16_QUADS`]), and `vpmaddwd` by the span's scale, both i16 of a lane
//! holding it, makes them the row's scaled int32 sum. A row's sums never leave their lane, so there
//! is no reduction across lanes. Q4_K/Q5_K's minimums times the activation sums and Q6_K's `-32`
//! offsets are `vpmaddwd`s of i16 pairs. The float steps are those of the kernel llama.cpp takes for
//! the matrix ([`Steps`]), so each result has the single-row dot's bits.

use std::{arch::x86_64::*, cell::RefCell};

use super::{lane_results, load_f32x8, load_u8x32, load_u32x8};
use crate::{
    kernels::{
        tiles::{
            OutLayout, gemm_by_packed_tiles, gemm_by_tiles, i16_pair, pack_quads, pack_token_tiles,
            q8k_pair_sums,
        },
        x86::{self, f16_to_f32},
    },
    quant::{
        BlockQ4K, BlockQ4Kx16, BlockQ5K, BlockQ6K, BlockQ6Kx16, BlockQ8K, INTERLEAVED_ROWS,
        InterleavedBlock, QK_K,
    },
};

/// Weight rows per tile: one per int32 lane of a vector.
const ROWS: usize = 8;
/// Tokens per tile.
const TOKENS: usize = 4;
/// Four-value quads per super-block.
const QUADS: usize = QK_K / 4;
/// 32-value chunks per super-block: eight quads, one 8 x 8 word transpose each.
const CHUNKS: usize = QK_K / 32;
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
#[repr(C, align(32))]
struct RowsLanes {
    /// `q[k]`, lane `r`: values `4k..4k + 4` of row `r`, a byte each.
    q: [[u32; ROWS]; QUADS],
    /// `scales[j]`, lane `r`: the scale of row `r`'s `j`-th span (32 values; Q6_K 16) in both i16.
    scales: [[u32; ROWS]; SIXTEENS],
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
#[repr(C, align(32))]
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

/// A row's values in natural order, 32 to a chunk.
type RowValues = [[u8; 32]; CHUNKS];

/// A K-quant weight block as the lane kernel reads it.
trait LaneBlock {
    /// Values per scale: 32, or Q6_K's 16.
    const SPAN: usize;
    /// Quads whose `vpmaddubsw` pairs add up in i16 without overflow (values below 16: eight; below
    /// 32: four; below 64: two), against activations of magnitude 128 at most.
    const I16_QUADS: usize;
    /// Whether the type has minimums (Q4_K, Q5_K) or Q6_K's `-32` offset.
    const MINIMUMS: bool;
    /// Unpacks one block: its values in natural order into `values`, the rest into lane `r` of
    /// `out`.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    unsafe fn unpack(&self, values: &mut RowValues, out: &mut RowsLanes, r: usize);
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn store_u8x32(out: &mut [u8; 32], v: __m256i) {
    // SAFETY: `out` is 32 writable bytes; `storeu` has no alignment requirement.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) }
}

/// The values of a Q4_K/Q5_K block in natural order: per 64 values `j`, the low nibbles of
/// `qs[32j..32j + 32]` then their high nibbles, each plus 16 where Q5_K's `qh` bit `2j` (then
/// `2j + 1`) of the byte at the value's position is set.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn k4_values(qs: &[u8; QK_K / 2], qh: Option<&[u8; QK_K / 8]>, out: &mut RowValues) {
    let low4 = _mm256_set1_epi8(0x0f);
    let sixteen = _mm256_set1_epi8(0x10);
    let high = qh.map(|h| load_u8x32(h));
    for (j, (q4, pair)) in qs
        .as_chunks::<32>()
        .0
        .iter()
        .zip(out.as_chunks_mut::<2>().0)
        .enumerate()
    {
        let bits = load_u8x32(q4);
        let mut values = [
            _mm256_and_si256(bits, low4),
            _mm256_and_si256(_mm256_srli_epi16::<4>(bits), low4),
        ];
        if let Some(high) = high {
            for (half, v) in values.iter_mut().enumerate() {
                let bit = _mm256_set1_epi8((1u8 << (2 * j + half)) as i8);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(high, bit), bit);
                *v = _mm256_add_epi8(*v, _mm256_and_si256(set, sixteen));
            }
        }
        store_u8x32(&mut pair[0], values[0]);
        store_u8x32(&mut pair[1], values[1]);
    }
}

/// The unsigned 6-bit values of a Q6_K block in natural order (ggml `dequantize_row_q6_K`): per 128
/// values `j`, from `ql[64j..64j + 64]` and `qh[32j..32j + 32]`, values `l`, `l + 32`, `l + 64` and
/// `l + 96` are the low nibbles of `ql[l]` and `ql[l + 32]`, then their high nibbles, with bit pairs
/// 0-1, 2-3, 4-5 and 6-7 of `qh[l]` on top.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q6_k_values(x: &BlockQ6K, out: &mut RowValues) {
    let low4 = _mm256_set1_epi8(0x0f);
    let high2 = _mm256_set1_epi8(0x30);
    let (ql, _) = x.ql.as_chunks::<32>();
    let (qh, _) = x.qh.as_chunks::<32>();
    for (j, (h, quarter)) in qh.iter().zip(out.as_chunks_mut::<4>().0).enumerate() {
        let (a, b, h) = (
            load_u8x32(&ql[2 * j]),
            load_u8x32(&ql[2 * j + 1]),
            load_u8x32(h),
        );
        let top = [
            _mm256_and_si256(_mm256_slli_epi16::<4>(h), high2),
            _mm256_and_si256(_mm256_slli_epi16::<2>(h), high2),
            _mm256_and_si256(h, high2),
            _mm256_and_si256(_mm256_srli_epi16::<2>(h), high2),
        ];
        let low = [
            _mm256_and_si256(a, low4),
            _mm256_and_si256(b, low4),
            _mm256_and_si256(_mm256_srli_epi16::<4>(a), low4),
            _mm256_and_si256(_mm256_srli_epi16::<4>(b), low4),
        ];
        for ((out, low), top) in quarter.iter_mut().zip(low).zip(top) {
            store_u8x32(out, _mm256_or_si256(low, top));
        }
    }
}

/// A tile's values in natural order, a row per entry, before they are spread a row per lane.
type TileValues = [RowValues; ROWS];

/// `out.q` from the tile's values: `q[k]`, lane `r`, is row `r`'s `k`-th word, each 32-value chunk
/// an 8 x 8 word transpose.
#[target_feature(enable = "avx2,fma,f16c")]
fn spread_values(values: &TileValues, out: &mut RowsLanes) {
    for (c, quads) in out.q.chunks_exact_mut(8).enumerate() {
        let rows: [__m256i; ROWS] = std::array::from_fn(|r| load_u8x32(&values[r][c]));
        for (q, words) in quads.iter_mut().zip(transpose_8x8(rows)) {
            // SAFETY: `q` is 32 writable bytes; unaligned store.
            unsafe { _mm256_storeu_si256(q.as_mut_ptr().cast(), words) };
        }
    }
}

/// The transpose of 8 vectors of 8 words: word `w` of vector `r` goes to word `r` of vector `w`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn transpose_8x8(r: [__m256i; 8]) -> [__m256i; 8] {
    // Per 128-bit half: rows interleaved in pairs, then in fours, so that `quads[4i + j]` holds, in
    // half h, word 4h + j of rows 4i..4i + 4.
    let pairs: [__m256i; 8] = std::array::from_fn(|k| {
        let (a, b) = (r[k & !1], r[k | 1]);
        if k % 2 == 0 {
            _mm256_unpacklo_epi32(a, b)
        } else {
            _mm256_unpackhi_epi32(a, b)
        }
    });
    let quads: [__m256i; 8] = std::array::from_fn(|k| {
        let (i, j) = (k / 4, k % 4);
        let (a, b) = (pairs[4 * i + j / 2], pairs[4 * i + j / 2 + 2]);
        if j % 2 == 0 {
            _mm256_unpacklo_epi64(a, b)
        } else {
            _mm256_unpackhi_epi64(a, b)
        }
    });
    let mut out = [_mm256_setzero_si256(); 8];
    for j in 0..4 {
        out[j] = _mm256_permute2x128_si256::<0x20>(quads[j], quads[4 + j]);
        out[4 + j] = _mm256_permute2x128_si256::<0x31>(quads[j], quads[4 + j]);
    }
    out
}

/// Unpacks a Q4_K/Q5_K block's values and scales into lane `r` of `out`.
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_k4(
    (d, dmin, packed): (half::f16, half::f16, &[u8; 12]),
    (qs, qh): (&[u8; QK_K / 2], Option<&[u8; QK_K / 8]>),
    (values, out): (&mut RowValues, &mut RowsLanes),
    r: usize,
) {
    k4_values(qs, qh, values);
    let (scales, mins) = x86::scales_mins_k4(packed);
    let [scales, mins] = [scales, mins].map(u64::to_le_bytes);
    for (j, &scale) in scales.iter().enumerate() {
        out.scales[j][r] = i16_pair(i16::from(scale), i16::from(scale));
    }
    for (g, m) in mins.as_chunks::<2>().0.iter().enumerate() {
        out.pairs[g][r] = i16_pair(i16::from(m[0]), i16::from(m[1]));
    }
    out.d[r] = f16_to_f32(d);
    out.dmin[r] = f16_to_f32(dmin);
}

impl LaneBlock for BlockQ4K {
    const SPAN: usize = 32;
    const I16_QUADS: usize = 8;
    const MINIMUMS: bool = true;
    unsafe fn unpack(&self, values: &mut RowValues, out: &mut RowsLanes, r: usize) {
        let parts = (self.d, self.dmin, &self.scales);
        // SAFETY: the caller's CPU has the tier's features (this function's contract).
        unsafe { unpack_k4(parts, (&self.qs, None), (values, out), r) }
    }
}

impl LaneBlock for BlockQ5K {
    const SPAN: usize = 32;
    const I16_QUADS: usize = 4;
    const MINIMUMS: bool = true;
    unsafe fn unpack(&self, values: &mut RowValues, out: &mut RowsLanes, r: usize) {
        let parts = (self.d, self.dmin, &self.scales);
        // SAFETY: as for Q4_K.
        unsafe { unpack_k4(parts, (&self.qs, Some(&self.qh)), (values, out), r) }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_q6_k(x: &BlockQ6K, values: &mut RowValues, out: &mut RowsLanes, r: usize) {
    q6_k_values(x, values);
    for (j, &scale) in x.scales.iter().enumerate() {
        out.scales[j][r] = i16_pair(i16::from(scale), i16::from(scale));
    }
    for (m, pair) in x.scales.as_chunks::<2>().0.iter().enumerate() {
        out.pairs[m][r] = i16_pair(i16::from(pair[0]), i16::from(pair[1]));
    }
    out.d[r] = f16_to_f32(x.d);
}

impl LaneBlock for BlockQ6K {
    const SPAN: usize = 16;
    const I16_QUADS: usize = 2;
    const MINIMUMS: bool = false;
    unsafe fn unpack(&self, values: &mut RowValues, out: &mut RowsLanes, r: usize) {
        // SAFETY: as for Q4_K.
        unsafe { unpack_q6_k(self, values, out, r) }
    }
}

/// Unpacks a tile of rows (`nb` super-blocks each) into `out`.
#[target_feature(enable = "avx2,fma,f16c")]
fn pack_rows<W: LaneBlock>(rows: &[&[W]; ROWS], out: &mut Vec<RowsLanes>) {
    let nb = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    out.clear();
    out.resize(nb, RowsLanes::default());
    let mut values: TileValues = [[[0; 32]; CHUNKS]; ROWS];
    for (i, p) in out.iter_mut().enumerate() {
        for (r, (row, values)) in rows.iter().zip(&mut values).enumerate() {
            // SAFETY: this function's target features are the tier's.
            unsafe { row[i].unpack(values, p, r) };
        }
        spread_values(&values, p);
    }
}

/// Unpacks half `h` of a group of rows interleaved sixteen at a time (`group`: its super-blocks), a
/// tile of eight rows, into `out`: each row's super-block as the file holds it, then as
/// [`pack_rows`] unpacks it.
#[target_feature(enable = "avx2,fma,f16c")]
fn pack_half<W: LaneBlock, G: InterleavedBlock<Row = W>>(
    group: &[G],
    h: usize,
    out: &mut Vec<RowsLanes>,
) {
    out.clear();
    out.resize(group.len(), RowsLanes::default());
    let mut values: TileValues = [[[0; 32]; CHUNKS]; ROWS];
    for (block, p) in group.iter().zip(out.iter_mut()) {
        for (r, values) in values.iter_mut().enumerate() {
            // SAFETY: this function's target features are the tier's.
            unsafe { block.row(ROWS * h + r).unpack(values, p, r) };
        }
        spread_values(&values, p);
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
/// activations over the spans `spans`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn add_scaled_products<W: LaneBlock>(
    w: &RowsLanes,
    y: &TokensLanes,
    spans: std::ops::Range<usize>,
    s1: &mut [__m256i; TOKENS],
) {
    let quads = W::SPAN / 4;
    for j in spans {
        let scale = load_u32x8(&w.scales[j]);
        for run in (quads * j..quads * (j + 1)).step_by(W::I16_QUADS) {
            let mut p = [_mm256_setzero_si256(); TOKENS];
            for k in run..run + W::I16_QUADS {
                let q = load_u32x8(&w.q[k]);
                for (t, pairs) in p.iter_mut().enumerate() {
                    let a = _mm256_set1_epi32(y.qs[t][k] as i32);
                    *pairs = _mm256_add_epi16(*pairs, _mm256_maddubs_epi16(q, a));
                }
            }
            for (sum, p) in s1.iter_mut().zip(p) {
                *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(p, scale));
            }
        }
    }
}

/// Per token, lane `r`: the sum over `words` of row `r`'s i16 pair in `weights[m]` times the token's
/// i16 pair `token(t)[m]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn pair_products(
    weights: &[[u32; ROWS]],
    words: std::ops::Range<usize>,
    token: impl Fn(usize, usize) -> u32,
) -> [__m256i; TOKENS] {
    let mut sums = [_mm256_setzero_si256(); TOKENS];
    for m in words {
        let w = load_u32x8(&weights[m]);
        for (t, sum) in sums.iter_mut().enumerate() {
            let a = _mm256_set1_epi32(token(t, m) as i32);
            *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(w, a));
        }
    }
    sums
}

/// Per token, lane `r`: `S2` of row `r` (Q4_K/Q5_K's minimums times the activation sums) over the
/// 64-value groups `groups`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn minimum_products(
    w: &RowsLanes,
    y: &TokensLanes,
    groups: std::ops::Range<usize>,
) -> [__m256i; TOKENS] {
    pair_products(&w.pairs, groups, |t, g| y.sub_sums[t][g])
}

/// Per token, lane `r`: Q6_K's offset of row `r`, `32 sum(scale * 16-value activation sum)`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q6_k_offsets(w: &RowsLanes, y: &TokensLanes) -> [__m256i; TOKENS] {
    pair_products(&w.pairs, 0..SIXTEENS / 2, |t, m| y.bsums[t][m])
        .map(|o| _mm256_slli_epi32::<5>(o))
}

/// Per token, lane `r`: row `r`'s dot along the repacked GEMM's steps (Q4_K).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn gemm_sums<W: LaneBlock>(rows: &[RowsLanes], tokens: &[TokensLanes]) -> [__m256; TOKENS] {
    let mut acc = [_mm256_setzero_ps(); TOKENS];
    for (w, y) in rows.iter().zip(tokens) {
        let d = load_f32x8(&w.d);
        for g in 0..GROUPS {
            let mut s1 = [_mm256_setzero_si256(); TOKENS];
            add_scaled_products::<W>(w, y, 2 * g..2 * g + 2, &mut s1);
            for (t, acc) in acc.iter_mut().enumerate() {
                let d_dy = _mm256_mul_ps(d, _mm256_set1_ps(y.d[t]));
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1[t]), d_dy, *acc);
            }
        }
    }
    let mut acc_m = [_mm256_setzero_ps(); TOKENS];
    for (w, y) in rows.iter().zip(tokens) {
        let dmin = load_f32x8(&w.dmin);
        for g in 0..GROUPS {
            let s2 = minimum_products(w, y, g..g + 1);
            for (t, acc) in acc_m.iter_mut().enumerate() {
                let dmin_dy = _mm256_mul_ps(dmin, _mm256_set1_ps(y.d[t]));
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s2[t]), dmin_dy, *acc);
            }
        }
    }
    std::array::from_fn(|t| _mm256_sub_ps(acc[t], acc_m[t]))
}

/// Per token, lane `r`: row `r`'s dot along the tiled product's steps.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn tiled_sums<W: LaneBlock>(rows: &[RowsLanes], tokens: &[TokensLanes]) -> [__m256; TOKENS] {
    let mut acc = [_mm256_setzero_ps(); TOKENS];
    for (w, y) in rows.iter().zip(tokens) {
        let mut s1 = [_mm256_setzero_si256(); TOKENS];
        add_scaled_products::<W>(w, y, 0..QK_K / W::SPAN, &mut s1);
        if !W::MINIMUMS {
            for (s1, offset) in s1.iter_mut().zip(q6_k_offsets(w, y)) {
                *s1 = _mm256_sub_epi32(*s1, offset);
            }
        }
        let d = load_f32x8(&w.d);
        let mut result: [__m256; TOKENS] =
            std::array::from_fn(|t| _mm256_mul_ps(_mm256_cvtepi32_ps(s1[t]), d));
        if W::MINIMUMS {
            let s2 = minimum_products(w, y, 0..GROUPS);
            let dmin = load_f32x8(&w.dmin);
            for (r, s2) in result.iter_mut().zip(s2) {
                *r = _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(s2), *r);
            }
        }
        for (t, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(result[t], _mm256_set1_ps(y.d[t]), *acc);
        }
    }
    acc
}

/// The results of one tile, `out[r][t]` for row `r` and token `t`, along `steps`.
#[target_feature(enable = "avx2,fma,f16c")]
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
    lane_results(sums)
}

/// Every row of `w` against every token of `x` (`nb` super-blocks each) along `steps`, into `out`
/// as `layout` places them.
#[target_feature(enable = "avx2,fma,f16c")]
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
/// each half of a group a tile.
#[target_feature(enable = "avx2,fma,f16c")]
fn gemm_groups<W: LaneBlock, G: InterleavedBlock<Row = W>>(
    (w, x, nb): (&[G], &[BlockQ8K], usize),
    (out, layout): (&mut [f32], OutLayout),
    steps: Steps,
) {
    const { assert!(INTERLEAVED_ROWS == 2 * ROWS) };
    let rows = w.len().checked_div(nb).unwrap_or(0) * INTERLEAVED_ROWS;
    SCRATCH.with_borrow_mut(|s| {
        gemm_by_packed_tiles(
            (rows, x, nb),
            (out, layout),
            (&mut s.tokens, &mut s.rows),
            pack_tokens,
            |first_row, buf| {
                let group = &w[first_row / INTERLEAVED_ROWS * nb..][..nb];
                pack_half(group, first_row % INTERLEAVED_ROWS / ROWS, buf)
            },
            |rows, tokens| dot_tile::<W>(rows, tokens, steps),
        );
    });
}

/// [`gemm_q4_k_q8_k_repacked`] of Q4_K rows interleaved sixteen at a time (`w`: groups of `nb`
/// super-blocks), with the same bits.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q4_k_x16_q8_k_repacked(
    w: &[BlockQ4Kx16],
    x: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm_groups((w, x, nb), (out, layout), Steps::RepackedGemm);
}

/// [`gemm_q6_k_q8_k`] of Q6_K rows interleaved sixteen at a time (`w`: groups of `nb` super-blocks),
/// with the same bits.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q6_k_x16_q8_k(
    w: &[BlockQ6Kx16],
    x: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm_groups((w, x, nb), (out, layout), Steps::Tiled);
}

/// Q4_K rows of `w` against the tokens of `x` (`nb` super-blocks each) along llama.cpp's repacked
/// GEMM ([`KPath::RepackedGemm`](crate::kernels::k_numerics::KPath::RepackedGemm)), into `out` as
/// `layout` places them, with the bits of the single-row dots along that path.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q4_k_q8_k_repacked(
    w: &[BlockQ4K],
    x: &[BlockQ8K],
    nb: usize,
    out: &mut [f32],
    layout: OutLayout,
) {
    gemm((w, x, nb), (out, layout), Steps::RepackedGemm);
}

/// Defines a tiled K-quant product along llama.cpp's tiled product
/// ([`KPath::Tiled`](crate::kernels::k_numerics::KPath::Tiled)).
macro_rules! lane_products {
    ($($name:ident: $w:ty;)*) => {$(
        /// Every row of `w` against every token of `x` (`nb` super-blocks each) along llama.cpp's
        /// tiled product, into `out` as `layout` places them, with the single-row dots' bits.
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
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
