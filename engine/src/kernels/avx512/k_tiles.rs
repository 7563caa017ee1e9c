//! Tiled K-quant products (prefill) on the AVX-512 tier: register tiles of four weight rows by four
//! tokens, with the bits of the single-row dots along llama.cpp's tiled product
//! ([`KPath::Tiled`](crate::kernels::k_numerics::KPath::Tiled)), the path its x86 build takes for
//! every K-quant product of eight tokens or more that it does not repack.
//!
//! A call unpacks its tokens once, four at a time, into [`TokensK`] (values, block sums and the scales
//! each tile needs), and each tile of rows once into [`RowsK`] (values as unsigned bytes, Q5_K's fifth
//! and Q6_K's high bits included; scales and minimums as i16; the f16 scales as f32), so the inner loop
//! is `vpmaddubsw` + `vpdpwssd` on loads alone. Per (row, token, super-block) it forms the exact
//! integers `S1` (the scaled sums; Q6_K: less its `-32` offset) and, for Q4_K and Q5_K, `S2` (the
//! minimums times the activation sums), then the float steps: `r = S1 d` (less `dmin S2`, fused) and
//! `acc = fma(r, d_y, acc)`, two (row, token) pairs per 16-lane vector.

use std::{
    arch::{asm, x86_64::*},
    cell::RefCell,
};

use super::{broadcast_u8x32, load_i8x64, load_u8x64, spread_i16};
use crate::{
    kernels::{
        tiles::{OutLayout, gemm_by_tiles},
        x86::{self, f16_to_f32},
    },
    quant::{BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K},
};

/// Weight rows per tile.
const ROWS: usize = 4;
/// Tokens per tile.
const TOKENS: usize = 4;
/// 64-value groups (two sub-blocks) per super-block.
const GROUPS: usize = QK_K / 64;

/// One super-block of a tile of tokens.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct TokensK {
    qs: [[[i8; 64]; GROUPS]; TOKENS],
    /// Per token, the sums of its eight 32-value sub-blocks.
    sub_sums: [[i16; 8]; TOKENS],
    /// Per token, the sums of its sixteen 16-value sub-blocks.
    bsums: [[i16; 16]; TOKENS],
    /// Lane `r * TOKENS + t`: token `t`'s scale (for every row `r`).
    d: [f32; ROWS * TOKENS],
}

impl Default for TokensK {
    fn default() -> Self {
        Self {
            qs: [[[0; 64]; GROUPS]; TOKENS],
            sub_sums: [[0; 8]; TOKENS],
            bsums: [[0; 16]; TOKENS],
            d: [0.0; ROWS * TOKENS],
        }
    }
}

/// One super-block of a tile of rows.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct RowsK {
    /// Per row and 64-value group: sub-block `2g` in bytes 0..32, `2g + 1` in bytes 32..64.
    q: [[[u8; 64]; GROUPS]; ROWS],
    /// Per row and group, the scales of its four 128-bit lanes of products in i16 0..4.
    group_scales: [[[i16; 8]; GROUPS]; ROWS],
    /// Q4_K and Q5_K: the eight sub-block minimums.
    mins: [[i16; 8]; ROWS],
    /// Q6_K: the sixteen sub-block scales.
    scales: [[i16; 16]; ROWS],
    /// Lane `r * TOKENS + t`: row `r`'s `d` (for every token `t`).
    d: [f32; ROWS * TOKENS],
    dmin: [f32; ROWS],
}

impl Default for RowsK {
    fn default() -> Self {
        Self {
            q: [[[0; 64]; GROUPS]; ROWS],
            group_scales: [[[0; 8]; GROUPS]; ROWS],
            mins: [[0; 8]; ROWS],
            scales: [[0; 16]; ROWS],
            d: [0.0; ROWS * TOKENS],
            dmin: [0.0; ROWS],
        }
    }
}

/// Per-thread buffers: allocated on a thread's first product, then reused.
#[derive(Default)]
struct Scratch {
    tokens: Vec<TokensK>,
    rows: Vec<RowsK>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// What a type adds to its scaled sums.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Terms {
    /// Q4_K and Q5_K: `dmin` times the minimums' products, subtracted.
    Minimums,
    /// Q6_K: no minimums; `32 * sum(scale * block sum)` subtracted from the int32 sums.
    Offset32,
}

/// A K-quant weight block as the tile kernel reads it.
trait KBlock {
    const TERMS: Terms;
    /// Unpacks one block, row `r` of `out`.
    ///
    /// # Safety
    /// The CPU must support the tier's features.
    unsafe fn unpack(&self, out: &mut RowsK, r: usize);
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn store_u8x64(out: &mut [u8; 64], v: __m512i) {
    // SAFETY: `out` is 64 writable bytes; `storeu` has no alignment requirement.
    unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), v) }
}

/// The values of a Q4_K/Q5_K block, fifth bits (`qh`, Q5_K) added, as the single-row dot forms them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn k4_values(qs: &[u8; QK_K / 2], qh: Option<&[u8; QK_K / 8]>, out: &mut [[u8; 64]; GROUPS]) {
    let low4 = _mm512_set1_epi8(0x0f);
    let sixteen = _mm512_set1_epi8(0x10);
    let nibble_shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    let (q4, _) = qs.as_chunks::<32>();
    let high = match qh {
        Some(h) => broadcast_u8x32(h),
        None => _mm512_setzero_si512(),
    };
    let mut bit = _mm512_inserti64x4::<1>(_mm512_set1_epi8(1), _mm256_set1_epi8(2));
    for (g, o) in out.iter_mut().enumerate() {
        let bits = _mm512_srlv_epi64(broadcast_u8x32(&q4[g]), nibble_shift);
        let mut q = _mm512_and_si512(bits, low4);
        if qh.is_some() {
            q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(high, bit), q, sixteen);
            bit = _mm512_slli_epi16::<2>(bit);
        }
        store_u8x64(o, q);
    }
}

/// Unpacks the common parts of a Q4_K/Q5_K block into row `r` of `out`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_k4(
    (d, dmin, packed): (half::f16, half::f16, &[u8; 12]),
    (qs, qh): (&[u8; QK_K / 2], Option<&[u8; QK_K / 8]>),
    out: &mut RowsK,
    r: usize,
) {
    k4_values(qs, qh, &mut out.q[r]);
    let (scales, mins) = x86::scales_mins_k4(packed);
    // Group g's lanes hold scales 2g, 2g, 2g + 1, 2g + 1, then zeros: one word permutation of the
    // eight scales widened to i16, the zeros by mask.
    const PICKS: [i16; 32] = {
        let mut picks = [0i16; 32];
        let mut g = 0;
        while g < GROUPS {
            let s = 2 * g as i16;
            picks[8 * g] = s;
            picks[8 * g + 1] = s;
            picks[8 * g + 2] = s + 1;
            picks[8 * g + 3] = s + 1;
            g += 1;
        }
        picks
    };
    const KEEP: u32 = 0x0f0f_0f0f;
    let wide = _mm512_castsi128_si512(x86::u8x8_to_i16(scales));
    // SAFETY: `PICKS` is 64 readable bytes, `out.group_scales[r]` and `out.mins[r]` are 64 and 16
    // writable bytes; unaligned accesses.
    unsafe {
        let picks = _mm512_loadu_si512(PICKS.as_ptr().cast());
        let groups = _mm512_maskz_permutexvar_epi16(KEEP, picks, wide);
        _mm512_storeu_si512(out.group_scales[r].as_mut_ptr().cast(), groups);
        _mm_storeu_si128(out.mins[r].as_mut_ptr().cast(), x86::u8x8_to_i16(mins));
    }
    out.d[r * TOKENS..(r + 1) * TOKENS].fill(f16_to_f32(d));
    out.dmin[r] = f16_to_f32(dmin);
}

impl KBlock for BlockQ4K {
    const TERMS: Terms = Terms::Minimums;
    unsafe fn unpack(&self, out: &mut RowsK, r: usize) {
        // SAFETY: the caller's CPU has the tier's features (this function's contract).
        unsafe { unpack_k4((self.d, self.dmin, &self.scales), (&self.qs, None), out, r) }
    }
}

impl KBlock for BlockQ5K {
    const TERMS: Terms = Terms::Minimums;
    unsafe fn unpack(&self, out: &mut RowsK, r: usize) {
        let bits = (&self.qs, Some(&self.qh));
        // SAFETY: as for Q4_K.
        unsafe { unpack_k4((self.d, self.dmin, &self.scales), bits, out, r) }
    }
}

/// The unsigned 6-bit values of a Q6_K block in natural order, as the single-row dot forms them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q6_k_values(x: &BlockQ6K, out: &mut [[u8; 64]; GROUPS]) {
    /// `(a & b) | c` for `vpternlogd`.
    const A_AND_B_OR_C: i32 = 0xea;
    let low4 = _mm512_set1_epi8(0x0f);
    let high2 = _mm512_set1_epi8(0x30);
    let first_pairs = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4);
    let second_pairs = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
    let (ql, _) = x.ql.as_chunks::<64>();
    let (qh, _) = x.qh.as_chunks::<32>();
    for j in 0..QK_K / 128 {
        let (l, h) = (load_u8x64(&ql[j]), broadcast_u8x32(&qh[j]));
        let h_first = _mm512_and_si512(_mm512_sllv_epi64(h, first_pairs), high2);
        let h_second = _mm512_and_si512(_mm512_srlv_epi64(h, second_pairs), high2);
        let first = _mm512_ternarylogic_epi32::<A_AND_B_OR_C>(l, low4, h_first);
        let second =
            _mm512_ternarylogic_epi32::<A_AND_B_OR_C>(_mm512_srli_epi16::<4>(l), low4, h_second);
        store_u8x64(&mut out[2 * j], first);
        store_u8x64(&mut out[2 * j + 1], second);
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_q6_k(x: &BlockQ6K, out: &mut RowsK, r: usize) {
    q6_k_values(x, &mut out.q[r]);
    let scales = x.scales.map(i16::from);
    for (g, lanes) in out.group_scales[r].iter_mut().enumerate() {
        let four = &scales[4 * g..4 * g + 4];
        *lanes = [four[0], four[1], four[2], four[3], 0, 0, 0, 0];
    }
    out.scales[r] = scales;
    out.d[r * TOKENS..(r + 1) * TOKENS].fill(f16_to_f32(x.d));
}

impl KBlock for BlockQ6K {
    const TERMS: Terms = Terms::Offset32;
    unsafe fn unpack(&self, out: &mut RowsK, r: usize) {
        // SAFETY: as for Q4_K.
        unsafe { unpack_q6_k(self, out, r) }
    }
}

/// Unpacks a tile of rows (`nb` super-blocks each) into `out`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pack_rows<W: KBlock>(rows: &[&[W]; ROWS], out: &mut Vec<RowsK>) {
    let nb = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    out.clear();
    out.resize(nb, RowsK::default());
    for (i, p) in out.iter_mut().enumerate() {
        for (r, row) in rows.iter().enumerate() {
            // SAFETY: this function's target features are the tier's.
            unsafe { row[i].unpack(p, r) };
        }
    }
}

/// Unpacks `x` (tokens of `nb` super-blocks) into `out`, `nb` entries per tile of tokens; the last
/// tile is padded with zero tokens.
fn pack_tokens(x: &[BlockQ8K], nb: usize, out: &mut Vec<TokensK>) {
    let tokens = x.len() / nb;
    out.clear();
    out.resize(tokens.div_ceil(TOKENS) * nb, TokensK::default());
    for (t, blocks) in x.chunks_exact(nb).enumerate() {
        let (tile, lane) = (t / TOKENS, t % TOKENS);
        for (b, p) in blocks.iter().zip(&mut out[tile * nb..(tile + 1) * nb]) {
            let (groups, _) = b.qs.as_chunks::<64>();
            p.qs[lane].copy_from_slice(groups);
            p.bsums[lane] = b.bsums;
            // The single-row dot's `sub_block_sums`: wrapping i16 sums of pairs of 16-value sums.
            p.sub_sums[lane] =
                std::array::from_fn(|k| b.bsums[2 * k].wrapping_add(b.bsums[2 * k + 1]));
            for r in 0..ROWS {
                p.d[r * TOKENS + lane] = b.d;
            }
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn load_f32x16(v: &[f32; 16]) -> __m512 {
    // SAFETY: `v` is 16 readable f32; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_ps(v.as_ptr()) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn load_i16x8(v: &[i16; 8]) -> __m128i {
    // SAFETY: `v` is 16 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm_loadu_si128(v.as_ptr().cast()) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn load_i16x32(v: &[[i16; 8]; 4]) -> __m512i {
    // SAFETY: `v` is 64 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
}

/// Q6_K's offsets (`x86::q6_k_offset`) of row `r` for tokens `2h` (lanes 0..8) and `2h + 1` (lanes
/// 8..16).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q6_k_offsets(w: &RowsK, y: &TokensK, r: usize, h: usize) -> __m512i {
    // SAFETY: `w.scales[r]` is 32 readable bytes and `y.bsums[2h..2h + 2]` 64; unaligned loads.
    let (scales, bsums) = unsafe {
        (
            _mm512_broadcast_i64x4(_mm256_loadu_si256(w.scales[r].as_ptr().cast())),
            _mm512_loadu_si512(y.bsums[2 * h..].as_ptr().cast()),
        )
    };
    _mm512_slli_epi32::<5>(_mm512_madd_epi16(bsums, scales))
}

/// `vpdpwssd`: `acc` plus, per int32 lane, the sum of the products of its two i16 pairs of `a` and
/// `b`. Written as the instruction itself: the compiler otherwise splits most of them into
/// `vpmaddwd` + `vpaddd`, two instructions for one in the tile's inner loop.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dpwssd(mut acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    // SAFETY: a register-only instruction of this function's target features.
    unsafe {
        asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) a,
            b = in(zmm_reg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// Every int32 lane of each group of four replaced by the group's exact sum.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn sum_groups_of_four(v: __m512i) -> __m512i {
    let pairs = _mm512_add_epi32(v, _mm512_shuffle_epi32::<0b10_11_00_01>(v));
    _mm512_add_epi32(pairs, _mm512_shuffle_epi32::<0b01_00_11_10>(pairs))
}

/// Each group of eight int32 lanes replaced by the group's exact sum.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn sum_groups_of_eight(v: __m512i) -> __m512i {
    let quads = sum_groups_of_four(v);
    _mm512_add_epi32(quads, _mm512_shuffle_i32x4::<0b10_11_00_01>(quads, quads))
}

/// The results of one tile: rows `rows` (super-blocks `nb` = `rows.len()`) against one tile of
/// tokens, `out[r][t]` for row `r` and token `t`, along llama.cpp's tiled product.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_tile(rows: &[RowsK], tokens: &[TokensK], terms: Terms) -> [[f32; TOKENS]; ROWS] {
    let n = rows.len().min(tokens.len());
    // `acc[2r + h]`: lanes 0..8 for (row r, token 2h), 8..16 for (row r, token 2h + 1), every lane of
    // a half holding the same sum.
    let mut acc = [_mm512_setzero_ps(); ROWS * TOKENS / 2];
    let pick = |a: i32, b: i32| _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b);
    // Lane `r * TOKENS + t` of the tokens' scales is token `t`'s, for every row.
    let picks: [__m512i; ROWS * TOKENS / 2] = std::array::from_fn(|k| {
        let first = 2 * k as i32;
        pick(first, first + 1)
    });
    // The minimums' sums of tokens 2h and 2h + 1 sit in lanes 8h and 8h + 4.
    let min_picks: [__m512i; TOKENS / 2] = std::array::from_fn(|h| {
        let first = 8 * h as i32;
        pick(first, first + 4)
    });
    for (w, y) in rows[..n].iter().zip(&tokens[..n]) {
        let sums = group_sums(w, y, 0..GROUPS);
        let dy = load_f32x16(&y.d);
        for (r, row_sums) in sums.iter().enumerate() {
            let minimums = (terms == Terms::Minimums).then(|| {
                let mins = _mm512_broadcast_i32x4(load_i16x8(&w.mins[r]));
                sum_groups_of_four(_mm512_madd_epi16(mins, load_i16x32(&y.sub_sums)))
            });
            for h in 0..TOKENS / 2 {
                let (a, b) = (row_sums[2 * h], row_sums[2 * h + 1]);
                let low = _mm512_shuffle_i64x2::<0b01_00_01_00>(a, b);
                let high = _mm512_shuffle_i64x2::<0b11_10_11_10>(a, b);
                let mut folded = _mm512_add_epi32(low, high);
                if terms == Terms::Offset32 {
                    folded = _mm512_sub_epi32(folded, q6_k_offsets(w, y, r, h));
                }
                let total = _mm512_cvtepi32_ps(sum_groups_of_eight(folded));
                let k = r * TOKENS / 2 + h;
                let mut result = _mm512_mul_ps(total, _mm512_set1_ps(w.d[r * TOKENS]));
                if let Some(minimums) = minimums {
                    let s2 = _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(min_picks[h], minimums));
                    result = _mm512_fnmadd_ps(_mm512_set1_ps(w.dmin[r]), s2, result);
                }
                let scale = _mm512_permutexvar_ps(picks[k], dy);
                acc[k] = _mm512_fmadd_ps(result, scale, acc[k]);
            }
        }
    }
    let mut out = [[0f32; TOKENS]; ROWS];
    for (r, row) in out.iter_mut().enumerate() {
        for (t, o) in row.iter_mut().enumerate() {
            let mut lanes = [0f32; 16];
            // SAFETY: `lanes` has room for 16 f32; unaligned store.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc[r * TOKENS / 2 + t / 2]) };
            *o = lanes[8 * (t % 2)];
        }
    }
    out
}

/// The scaled sums of one super-block's 64-value groups `groups` for every (row, token) of a tile:
/// `sums[r][t]`'s 16 int32 lanes add up to them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn group_sums(w: &RowsK, y: &TokensK, groups: std::ops::Range<usize>) -> [[__m512i; TOKENS]; ROWS] {
    let mut sums = [[_mm512_setzero_si512(); TOKENS]; ROWS];
    for g in groups {
        let qy: [__m512i; TOKENS] = std::array::from_fn(|t| load_i8x64(&y.qs[t][g]));
        for (r, row_sums) in sums.iter_mut().enumerate() {
            let q = load_u8x64(&w.q[r][g]);
            let lanes = _mm512_broadcast_i32x4(load_i16x8(&w.group_scales[r][g]));
            let sc = spread_i16(lanes, [0, 1, 2, 3]);
            for (sum, &y) in row_sums.iter_mut().zip(&qy) {
                *sum = dpwssd(*sum, _mm512_maddubs_epi16(q, y), sc);
            }
        }
    }
    sums
}

/// One vector whose lane `4r + t` is the exact sum of `sums[r][t]`'s 16 lanes: a transpose-and-add
/// tree (pairs of lanes, of pairs, of 128-bit quarters, of halves) that ends with the totals in order.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn tile_totals(sums: &[[__m512i; TOKENS]; ROWS]) -> __m512i {
    let v: [__m512i; ROWS * TOKENS] = std::array::from_fn(|k| sums[k / TOKENS][k % TOKENS]);
    let pairs: [__m512i; 8] = std::array::from_fn(|i| {
        let (a, b) = (v[2 * i], v[2 * i + 1]);
        _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b))
    });
    // Per 128-bit quarter: sources 4j..4j + 4 summed over that quarter.
    let quads: [__m512i; 4] = std::array::from_fn(|j| {
        let (c, d) = (pairs[2 * j], pairs[2 * j + 1]);
        _mm512_add_epi32(_mm512_unpacklo_epi64(c, d), _mm512_unpackhi_epi64(c, d))
    });
    let halves: [__m512i; 2] = std::array::from_fn(|i| {
        let (x, y) = (quads[2 * i], quads[2 * i + 1]);
        _mm512_add_epi32(
            _mm512_shuffle_i32x4::<0b10_00_10_00>(x, y),
            _mm512_shuffle_i32x4::<0b11_01_11_01>(x, y),
        )
    });
    let (x, y) = (halves[0], halves[1]);
    _mm512_add_epi32(
        _mm512_shuffle_i32x4::<0b10_00_10_00>(x, y),
        _mm512_shuffle_i32x4::<0b11_01_11_01>(x, y),
    )
}

/// The results of one tile of Q4_K rows along llama.cpp's repacked GEMM: per 64-value group `g`, the
/// exact sums `S1_g` and `S2_g` of every (row, token), lane `4r + t`, fused with `d dy` and `dmin dy`
/// into two sums; their difference at the end.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_tile_gemm(rows: &[RowsK], tokens: &[TokensK]) -> [[f32; TOKENS]; ROWS] {
    let n = rows.len().min(tokens.len());
    let mut acc = _mm512_setzero_ps();
    let mut acc_m = _mm512_setzero_ps();
    // Lane `4r + t` of a group's minimums: row r's products (lane `4t + g`), rows 0-1 from the first
    // pair of vectors and 2-3 from the second.
    let min_index: [__m512i; GROUPS] = std::array::from_fn(|g| {
        let lane = |i: i32| 16 * ((i / 4) % 2) + 4 * (i % 4) + g as i32;
        _mm512_setr_epi32(
            lane(0),
            lane(1),
            lane(2),
            lane(3),
            lane(4),
            lane(5),
            lane(6),
            lane(7),
            lane(8),
            lane(9),
            lane(10),
            lane(11),
            lane(12),
            lane(13),
            lane(14),
            lane(15),
        )
    });
    let row_of_lane = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    for (w, y) in rows[..n].iter().zip(&tokens[..n]) {
        let dy = load_f32x16(&y.d);
        let d_dy = _mm512_mul_ps(load_f32x16(&w.d), dy);
        // SAFETY: `w.dmin` is 4 readable f32; unaligned load.
        let dmin = _mm512_castps128_ps512(unsafe { _mm_loadu_ps(w.dmin.as_ptr()) });
        let dmin_dy = _mm512_mul_ps(_mm512_permutexvar_ps(row_of_lane, dmin), dy);
        let products: [__m512i; ROWS] = std::array::from_fn(|r| {
            let mins = _mm512_broadcast_i32x4(load_i16x8(&w.mins[r]));
            _mm512_madd_epi16(mins, load_i16x32(&y.sub_sums))
        });
        for (g, index) in min_index.iter().enumerate() {
            let s1 = tile_totals(&group_sums(w, y, g..g + 1));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), d_dy, acc);
            let first = _mm512_permutex2var_epi32(products[0], *index, products[1]);
            let second = _mm512_permutex2var_epi32(products[2], *index, products[3]);
            let s2 = _mm512_mask_blend_epi32(0xff00, first, second);
            acc_m = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s2), dmin_dy, acc_m);
        }
    }
    let mut lanes = [0f32; 16];
    let mut min_lanes = [0f32; 16];
    // SAFETY: both have room for 16 f32; unaligned stores.
    unsafe {
        _mm512_storeu_ps(lanes.as_mut_ptr(), acc);
        _mm512_storeu_ps(min_lanes.as_mut_ptr(), acc_m);
    }
    std::array::from_fn(|r| std::array::from_fn(|t| lanes[4 * r + t] - min_lanes[4 * r + t]))
}

/// Every row of `w` against every token of `x` (`nb` super-blocks each), into `out` as `layout`
/// places them, with the single-row dots' bits. A tile of rows goes across every tile of tokens
/// before the next, so its unpacked blocks stay in cache while the tokens stream past.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemm<W: KBlock>(w: &[W], x: &[BlockQ8K], nb: usize, out: &mut [f32], layout: OutLayout) {
    gemm_with(w, x, nb, (out, layout), |rows, tokens| {
        dot_tile(rows, tokens, W::TERMS)
    });
}

/// [`gemm`] with `dot` as the tile kernel.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemm_with<W: KBlock>(
    w: &[W],
    x: &[BlockQ8K],
    nb: usize,
    (out, layout): (&mut [f32], OutLayout),
    dot: impl FnMut(&[RowsK], &[TokensK]) -> [[f32; TOKENS]; ROWS],
) {
    SCRATCH.with_borrow_mut(|s| {
        gemm_by_tiles(
            (w, x, nb),
            (out, layout),
            (&mut s.tokens, &mut s.rows),
            pack_tokens,
            |tile, out| pack_rows(tile, out),
            dot,
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
    gemm_with(w, x, nb, (out, layout), |rows, tokens| {
        dot_tile_gemm(rows, tokens)
    });
}

tiled_products! {
    gemm_q4_k_q8_k: vec_dot_q4_k_q8_k, BlockQ4K, BlockQ8K;
    gemm_q5_k_q8_k: vec_dot_q5_k_q8_k, BlockQ5K, BlockQ8K;
    gemm_q6_k_q8_k: vec_dot_q6_k_q8_k, BlockQ6K, BlockQ8K;
}
