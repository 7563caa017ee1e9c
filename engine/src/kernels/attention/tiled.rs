//! llama.cpp's tiled flash attention over an f16 cache, the form its CPU backend takes for a batch
//! of [`TILED_MIN_TOKENS`] query tokens or more (`ggml_compute_forward_flash_attn_ext_tiled`): f32
//! throughout, the keys taken in tiles of [`KEY_BLOCK`] positions from position 0.
//!
//! Per tile and query row, as llama.cpp computes each: every score a fused multiply-add chain over
//! the head from 0, times the scale, plus the mask (0, or `-inf` for a position the row does not
//! see); the row's maximum rises to the tile's (the sums rescaled by the C library's `expf` of the
//! difference), the weights are ggml's vector `expf` of score minus maximum, their sum is added in
//! f64 sixteen at a time (each sixteen reduced as `_mm512_reduce_add_ps` reduces them), and each
//! value element gains one fused multiply-add per key, in key order. A row whose tile is all masked
//! changes nothing. At the end each row is scaled by the reciprocal of its sum.
//!
//! Here the rows lie one per lane of [`LANES`]: a tile's scores for sixteen rows are sixteen-lane
//! multiply-adds of the transposed queries by one broadcast key element, and the running maxima and
//! sums are lane-wise. Each row's operations are the ones above in the same order, so its bits do not
//! depend on which rows share its lanes, nor on the tier.

use super::{
    CacheValue, CachedHead, GroupQueries, KEY_BLOCK, KeyLayout, Scratch, load_block,
    write_normalized,
};

/// Query tokens of one sequence's forward call from which llama.cpp takes the tiled form
/// (`GGML_FA_TILE_Q`).
pub const TILED_MIN_TOKENS: usize = 64;

/// Query rows per lane group.
const LANES: usize = 16;
/// Keys scored together, one accumulator of sixteen rows each.
const KEY_STEP: usize = 4;
/// Rows whose weighted values are summed together.
const ROW_STEP: usize = 4;
/// Value elements per register block of those sums.
const VALUE_STEP: usize = 64;

/// The keys `from..to` of a tile (tile-relative) that one row sees; `to <= from` when none.
#[derive(Clone, Copy)]
struct Seen {
    from: usize,
    to: usize,
}

/// One lane group's view of a tile.
struct LaneTile {
    /// Per lane, the tile's keys its row sees.
    seen: [Seen; LANES],
    /// The keys any lane sees lie in `first..end`; the others weigh 0 for every lane, and are
    /// neither scored nor read.
    first: usize,
    end: usize,
}

/// Every row of `queries` over the f16 cache `kv`, as llama.cpp's tiled flash attention computes
/// it, into `out` (laid out as the queries).
///
/// # Safety
/// The CPU must support what `L` uses.
#[inline(always)]
pub(super) unsafe fn attend<T: CacheValue, L: Lanes, const HD: usize>(
    queries: &GroupQueries<'_>,
    kv: &CachedHead<'_, T>,
    out: &mut [f32],
    s: &mut Scratch,
) {
    let rows = queries.rows();
    let groups = rows.div_ceil(LANES);
    transpose_queries::<HD>(queries, groups, &mut s.queries);
    s.acc.clear();
    s.acc.resize(groups * LANES * HD, 0.0);
    s.max.clear();
    s.max.resize(groups * LANES, f32::NEG_INFINITY);
    s.sum.clear();
    s.sum.resize(groups * LANES, 0.0);
    s.keys.resize(KEY_BLOCK * HD, 0.0);
    s.values.resize(KEY_BLOCK * HD, 0.0);

    for (start, n) in queries.key_blocks() {
        load_block::<T, HD>(kv, (start, n), KeyLayout::Rows, s);
        for g in 0..groups {
            let tile = lane_tile(queries, g, start, n);
            if tile.end == 0 {
                continue;
            }
            let lanes = g * LANES..(g + 1) * LANES;
            let state = LaneState {
                max: first_lanes(&mut s.max[lanes.clone()]),
                sum: first_lanes(&mut s.sum[lanes]),
                acc: &mut s.acc[g * LANES * HD..(g + 1) * LANES * HD],
            };
            let queries_t = &s.queries[g * HD * LANES..(g + 1) * HD * LANES];
            // SAFETY: passed on from the caller.
            unsafe {
                tile_step::<L, HD>(queries_t, (&s.keys, &s.values), queries.scale, &tile, state)
            };
        }
    }
    write_normalized::<HD>(queries, s, out);
}

/// The query rows in lane groups, transposed: group `g`'s element `d` of lane `l` at
/// `(g * HD + d) * LANES + l`; lanes past the last row are zero.
#[inline(always)]
fn transpose_queries<const HD: usize>(
    queries: &GroupQueries<'_>,
    groups: usize,
    out: &mut Vec<f32>,
) {
    out.clear();
    out.resize(groups * HD * LANES, 0.0);
    for r in 0..queries.rows() {
        let (g, l) = (r / LANES, r % LANES);
        let at = queries.at(r);
        for (d, &q) in queries.q[at..at + HD].iter().enumerate() {
            out[(g * HD + d) * LANES + l] = q;
        }
    }
}

/// Which keys of the tile at `start` (`n` loaded) the rows of lane group `g` see.
#[inline(always)]
fn lane_tile(queries: &GroupQueries<'_>, g: usize, start: usize, n: usize) -> LaneTile {
    let mut seen = [Seen { from: 0, to: 0 }; LANES];
    for (l, seen) in seen.iter_mut().enumerate() {
        let r = g * LANES + l;
        if r >= queries.rows() {
            continue;
        }
        let t = r / queries.heads;
        let (first, visible) = (queries.first_visible(t), queries.visible(t));
        *seen = Seen {
            from: first.saturating_sub(start).min(n),
            to: visible.saturating_sub(start).min(n),
        };
    }
    let live = || seen.iter().filter(|s| s.to > s.from);
    LaneTile {
        seen,
        first: live().map(|s| s.from).min().unwrap_or(0),
        end: live().map(|s| s.to).max().unwrap_or(0),
    }
}

/// A lane group's running softmax state.
struct LaneState<'a> {
    max: &'a mut [f32; LANES],
    sum: &'a mut [f32; LANES],
    /// Per lane, its row's weighted sum of values (`LANES x HD`).
    acc: &'a mut [f32],
}

fn first_lanes(x: &mut [f32]) -> &mut [f32; LANES] {
    x.first_chunk_mut::<LANES>()
        .expect("a lane group's state holds a value per lane")
}

/// One lane group over one tile of keys and values (rows of `HD`).
///
/// # Safety
/// The CPU must support what `L` uses.
#[inline(always)]
unsafe fn tile_step<L: Lanes, const HD: usize>(
    queries_t: &[f32],
    (keys, values): (&[f32], &[f32]),
    scale: f32,
    tile: &LaneTile,
    state: LaneState<'_>,
) {
    let keys_seen = tile.first..tile.end;
    // SAFETY: passed on from the caller.
    let mut weights = unsafe { scores::<L, HD>(queries_t, keys, keys_seen.clone()) };
    for (k, w) in weights
        .iter_mut()
        .enumerate()
        .take(tile.end)
        .skip(tile.first)
    {
        for (w, seen) in w.iter_mut().zip(&tile.seen) {
            *w = if k >= seen.from && k < seen.to {
                *w * scale + 0.0
            } else {
                f32::NEG_INFINITY
            };
        }
    }
    let mut tile_max = [f32::NEG_INFINITY; LANES];
    for w in &weights[keys_seen.clone()] {
        for (m, &v) in tile_max.iter_mut().zip(w) {
            *m = if *m > v { *m } else { v };
        }
    }
    let mut live = [false; LANES];
    for l in 0..LANES {
        if tile_max[l] == f32::NEG_INFINITY {
            continue;
        }
        live[l] = true;
        let old = state.max[l];
        let new = old.max(tile_max[l]);
        if new > old {
            let rescale = crate::kernels::expf::expf(old - new);
            for a in &mut state.acc[l * HD..(l + 1) * HD] {
                *a *= rescale;
            }
            state.sum[l] *= rescale;
        }
        state.max[l] = new;
    }
    for w in &mut weights[keys_seen.clone()] {
        for (l, w) in w.iter_mut().enumerate() {
            *w = if live[l] {
                *w - state.max[l]
            } else {
                f32::NEG_INFINITY
            };
        }
        // SAFETY: passed on from the caller.
        unsafe { L::exp(w) };
    }
    let added = weight_sums(&weights);
    for l in 0..LANES {
        if live[l] {
            state.sum[l] = (f64::from(state.sum[l]) + added[l]) as f32;
        }
    }
    let (values, _) = values.as_chunks::<HD>();
    // SAFETY: passed on from the caller.
    unsafe {
        add_weighted_values::<L, HD>(
            &weights[keys_seen.clone()],
            &values[keys_seen],
            &live,
            state.acc,
        )
    };
}

/// Per key `k` of `keys_seen` and lane: the fused multiply-add chain of the lane's query and key `k`
/// over the head, from 0. The other keys' entries are 0.
///
/// # Safety
/// The CPU must support what `L` uses.
#[inline(always)]
unsafe fn scores<L: Lanes, const HD: usize>(
    queries_t: &[f32],
    keys: &[f32],
    keys_seen: std::ops::Range<usize>,
) -> [[f32; LANES]; KEY_BLOCK] {
    let mut out = [[0f32; LANES]; KEY_BLOCK];
    let (queries_t, _) = queries_t.as_chunks::<LANES>();
    let (key_rows, _) = keys.as_chunks::<HD>();
    let mut first = keys_seen.start;
    while first < keys_seen.end {
        let rows: [&[f32; HD]; KEY_STEP] =
            std::array::from_fn(|i| &key_rows[(first + i).min(KEY_BLOCK - 1)]);
        let kept = KEY_STEP.min(keys_seen.end - first);
        // SAFETY: the caller's CPU supports `L` (this function's contract).
        unsafe {
            let mut acc = [L::splat(0.0); KEY_STEP];
            for (d, q) in queries_t.iter().enumerate().take(HD) {
                let q = L::load(q);
                for (acc, row) in acc.iter_mut().zip(&rows) {
                    *acc = L::splat(row[d]).mul_add(q, *acc);
                }
            }
            for (out, acc) in out[first..first + kept].iter_mut().zip(acc) {
                acc.store(out);
            }
        }
        first += KEY_STEP;
    }
    out
}

/// Per lane, the sum of its weights as ggml's softmax adds them: each sixteen keys reduced as
/// `_mm512_reduce_add_ps` reduces a vector (halves, quarters, then pairs), those added in f64.
#[inline(always)]
fn weight_sums(weights: &[[f32; LANES]; KEY_BLOCK]) -> [f64; LANES] {
    let mut sums = [0f64; LANES];
    for chunk in weights.as_chunks::<16>().0 {
        let eighths: [[f32; LANES]; 8] =
            std::array::from_fn(|i| std::array::from_fn(|l| chunk[i + 8][l] + chunk[i][l]));
        let quarters: [[f32; LANES]; 4] =
            std::array::from_fn(|i| std::array::from_fn(|l| eighths[i + 4][l] + eighths[i][l]));
        for (l, sum) in sums.iter_mut().enumerate() {
            let reduced = (quarters[0][l] + quarters[2][l]) + (quarters[1][l] + quarters[3][l]);
            *sum += f64::from(reduced);
        }
    }
    sums
}

/// Vectors of sixteen value elements summed together per row.
const VALUE_VECTORS: usize = VALUE_STEP / LANES;

/// `acc[l] += sum over keys k of weights[k][l] * values[k]` (values as rows of `HD`), one fused
/// multiply-add per element and key, in key order, for the live lanes.
///
/// # Safety
/// The CPU must support what `L` uses.
#[inline(always)]
unsafe fn add_weighted_values<L: Lanes, const HD: usize>(
    weights: &[[f32; LANES]],
    values: &[[f32; HD]],
    live: &[bool; LANES],
    acc: &mut [f32],
) {
    let (acc_rows, _) = acc.as_chunks_mut::<HD>();
    let vectors = (HD / LANES).min(VALUE_VECTORS);
    for first in (0..LANES).step_by(ROW_STEP) {
        if !live[first..first + ROW_STEP].iter().any(|&l| l) {
            continue;
        }
        for d0 in (0..HD).step_by(vectors * LANES) {
            let at = |j: usize| d0 + j * LANES;
            // SAFETY: the caller's CPU supports `L` (this function's contract).
            unsafe {
                let mut sums = [[L::splat(0.0); VALUE_VECTORS]; ROW_STEP];
                for (i, sums) in sums.iter_mut().enumerate() {
                    for (j, sum) in sums.iter_mut().enumerate().take(vectors) {
                        *sum = L::load(lanes_at(&acc_rows[first + i], at(j)));
                    }
                }
                for (w, value) in weights.iter().zip(values) {
                    let v: [L; VALUE_VECTORS] =
                        std::array::from_fn(|j| L::load(lanes_at(value, at(j.min(vectors - 1)))));
                    for (i, sums) in sums.iter_mut().enumerate() {
                        let w = L::splat(w[first + i]);
                        for (sum, v) in sums.iter_mut().zip(v).take(vectors) {
                            *sum = v.mul_add(w, *sum);
                        }
                    }
                }
                for (i, sums) in sums.iter().enumerate() {
                    for (j, sum) in sums.iter().enumerate().take(vectors) {
                        sum.store(lanes_at_mut(&mut acc_rows[first + i], at(j)));
                    }
                }
            }
        }
    }
}

fn lanes_at(x: &[f32], at: usize) -> &[f32; LANES] {
    x[at..].first_chunk().expect("a whole vector of lanes")
}

fn lanes_at_mut(x: &mut [f32], at: usize) -> &mut [f32; LANES] {
    x[at..].first_chunk_mut().expect("a whole vector of lanes")
}

/// Sixteen f32 lanes in a tier's registers, with the operations the tiled form takes on them.
pub(crate) trait Lanes: Copy {
    /// # Safety
    /// The CPU must support the tier's instructions (so for every method).
    unsafe fn load(x: &[f32; LANES]) -> Self;
    /// # Safety
    /// As for [`Lanes::load`].
    unsafe fn store(self, out: &mut [f32; LANES]);
    /// # Safety
    /// As for [`Lanes::load`].
    unsafe fn splat(v: f32) -> Self;
    /// `self * b + c`, rounded once.
    ///
    /// # Safety
    /// As for [`Lanes::load`].
    unsafe fn mul_add(self, b: Self, c: Self) -> Self;
    /// [`ggml_expf`] of every lane, in place.
    ///
    /// # Safety
    /// As for [`Lanes::load`].
    #[inline(always)]
    unsafe fn exp(x: &mut [f32; LANES]) {
        for v in x {
            *v = ggml_expf(*v);
        }
    }
}

/// Lanes on any CPU.
pub(crate) type PortableLanes = [f32; LANES];

impl Lanes for PortableLanes {
    #[inline(always)]
    unsafe fn load(x: &[f32; LANES]) -> Self {
        *x
    }
    #[inline(always)]
    unsafe fn store(self, out: &mut [f32; LANES]) {
        *out = self;
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        [v; LANES]
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        std::array::from_fn(|l| self[l].mul_add(b[l], c[l]))
    }
}

/// Lanes in two AVX registers.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(crate) struct Avx2Lanes([std::arch::x86_64::__m256; 2]);

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx2Lanes {
    #[inline(always)]
    unsafe fn load(x: &[f32; LANES]) -> Self {
        use std::arch::x86_64::_mm256_loadu_ps;
        // SAFETY: 16 readable f32, unaligned loads; the caller guarantees AVX.
        unsafe {
            Self([
                _mm256_loadu_ps(x.as_ptr()),
                _mm256_loadu_ps(x.as_ptr().add(8)),
            ])
        }
    }
    #[inline(always)]
    unsafe fn store(self, out: &mut [f32; LANES]) {
        use std::arch::x86_64::_mm256_storeu_ps;
        // SAFETY: 16 writable f32, unaligned stores; the caller guarantees AVX.
        unsafe {
            _mm256_storeu_ps(out.as_mut_ptr(), self.0[0]);
            _mm256_storeu_ps(out.as_mut_ptr().add(8), self.0[1]);
        }
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        use std::arch::x86_64::_mm256_set1_ps;
        // SAFETY: the caller guarantees AVX.
        unsafe { Self([_mm256_set1_ps(v); 2]) }
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        use std::arch::x86_64::_mm256_fmadd_ps;
        // SAFETY: the caller guarantees FMA.
        unsafe {
            Self([
                _mm256_fmadd_ps(self.0[0], b.0[0], c.0[0]),
                _mm256_fmadd_ps(self.0[1], b.0[1], c.0[1]),
            ])
        }
    }
    /// [`ggml_expf`]'s steps eight lanes at a time, `2^n` built from its exponent bits; a vector with
    /// a lane whose `2^n` is not a normal f32 (and not past the cutoff of 0 or infinity) takes the
    /// scalar form.
    #[inline(always)]
    unsafe fn exp(x: &mut [f32; LANES]) {
        use std::arch::x86_64::*;
        for half in x.as_chunks_mut::<8>().0 {
            // SAFETY: 8 f32 read and written in place; the caller guarantees AVX2 and FMA.
            unsafe {
                let c = |bits: u32| _mm256_set1_ps(f32::from_bits(bits));
                let v = _mm256_loadu_ps(half.as_ptr());
                let round = c(0x4b40_0000);
                let z = _mm256_fmadd_ps(v, c(0x3fb8_aa3b), round);
                let n = _mm256_sub_ps(z, round);
                let b = _mm256_fnmadd_ps(n, c(0x35bf_be8e), _mm256_fnmadd_ps(n, c(0x3f31_7200), v));
                let u = _mm256_mul_ps(b, b);
                let high = _mm256_fmadd_ps(
                    _mm256_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
                    u,
                    _mm256_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
                );
                let j = _mm256_fmadd_ps(
                    high,
                    u,
                    _mm256_fmadd_ps(c(0x3f7f_fff6), b, _mm256_set1_ps(1.0)),
                );
                let normal = _mm256_and_ps(
                    _mm256_cmp_ps::<_CMP_GE_OQ>(n, _mm256_set1_ps(-126.0)),
                    _mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_set1_ps(127.0)),
                );
                let magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
                let far = _mm256_cmp_ps::<_CMP_GT_OQ>(magnitude, _mm256_set1_ps(192.0));
                if _mm256_movemask_ps(_mm256_or_ps(normal, far)) != 0xff {
                    for v in half.iter_mut() {
                        *v = ggml_expf(*v);
                    }
                    continue;
                }
                let exponent = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
                let power = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(exponent));
                let below = _mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps());
                let cutoff =
                    _mm256_blendv_ps(_mm256_set1_ps(f32::INFINITY), _mm256_setzero_ps(), below);
                let result = _mm256_blendv_ps(_mm256_mul_ps(j, power), cutoff, far);
                _mm256_storeu_ps(half.as_mut_ptr(), result);
            }
        }
    }
}

/// Lanes in one AVX-512 register.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(crate) struct Avx512Lanes(std::arch::x86_64::__m512);

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx512Lanes {
    #[inline(always)]
    unsafe fn load(x: &[f32; LANES]) -> Self {
        // SAFETY: 16 readable f32, unaligned load; the caller guarantees AVX-512 F.
        unsafe { Self(std::arch::x86_64::_mm512_loadu_ps(x.as_ptr())) }
    }
    #[inline(always)]
    unsafe fn store(self, out: &mut [f32; LANES]) {
        // SAFETY: 16 writable f32, unaligned store; the caller guarantees AVX-512 F.
        unsafe { std::arch::x86_64::_mm512_storeu_ps(out.as_mut_ptr(), self.0) }
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: the caller guarantees AVX-512 F.
        unsafe { Self(std::arch::x86_64::_mm512_set1_ps(v)) }
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        // SAFETY: the caller guarantees AVX-512 F.
        unsafe { Self(std::arch::x86_64::_mm512_fmadd_ps(self.0, b.0, c.0)) }
    }
    /// ggml's AVX-512 `ggml_v_expf`, instruction for instruction.
    #[inline(always)]
    unsafe fn exp(x: &mut [f32; LANES]) {
        use std::arch::x86_64::*;
        // SAFETY: 16 f32 read and written in place; the caller guarantees AVX-512 F.
        unsafe {
            let c = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
            let v = _mm512_loadu_ps(x.as_ptr());
            let round = c(0x4b40_0000);
            let z = _mm512_fmadd_ps(v, c(0x3fb8_aa3b), round);
            let n = _mm512_sub_ps(z, round);
            let b = _mm512_fnmadd_ps(n, c(0x35bf_be8e), _mm512_fnmadd_ps(n, c(0x3f31_7200), v));
            let far = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
            let u = _mm512_mul_ps(b, b);
            let high = _mm512_fmadd_ps(
                _mm512_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
                u,
                _mm512_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
            );
            let j = _mm512_fmadd_ps(
                high,
                u,
                _mm512_fmadd_ps(c(0x3f7f_fff6), b, _mm512_set1_ps(1.0)),
            );
            let mut result = _mm512_scalef_ps(j, n);
            if far != 0 {
                let below = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, _mm512_setzero_ps());
                let alt =
                    _mm512_mask_blend_ps(below, _mm512_set1_ps(f32::INFINITY), _mm512_setzero_ps());
                result = _mm512_mask_blend_ps(far, result, alt);
            }
            _mm512_storeu_ps(x.as_mut_ptr(), result);
        }
    }
}

/// `e^x` as ggml's AVX-512 `ggml_v_expf` computes each lane: `x = n ln 2 + b` with `n` rounded by the
/// `1.5 * 2^23` trick, a degree-5 polynomial in `b` evaluated as fused multiply-adds in its order, and
/// `2^n` applied by `vscalefps` (one rounding); `|n| > 192` gives 0 or infinity.
#[inline(always)]
pub(crate) fn ggml_expf(x: f32) -> f32 {
    let round = f32::from_bits(0x4b40_0000);
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), round);
    let n = z - round;
    let b = (-n).mul_add(
        f32::from_bits(0x35bf_be8e),
        (-n).mul_add(f32::from_bits(0x3f31_7200), x),
    );
    let u = b * b;
    let high = f32::from_bits(0x3c07_2010)
        .mul_add(b, f32::from_bits(0x3d2b_9f17))
        .mul_add(
            u,
            f32::from_bits(0x3e2a_af33).mul_add(b, f32::from_bits(0x3eff_fedb)),
        );
    let j = high.mul_add(u, f32::from_bits(0x3f7f_fff6).mul_add(b, 1.0));
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    scale_by_power_of_two(j, n)
}

/// `j * 2^n` rounded once, as `vscalefps` gives it, for an integral `n` with `|n| <= 192`.
#[inline(always)]
fn scale_by_power_of_two(j: f32, n: f32) -> f32 {
    if (-126.0..=127.0).contains(&n) {
        return j * f32::from_bits(((n as i32 + 127) as u32) << 23);
    }
    // Past f32's normal exponents: the product is exact in f64 and rounds once to f32.
    (f64::from(j) * f64::from_bits(((n as i64 + 1023) as u64) << 52)) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inputs across the exponential's whole range: normal results, results that are subnormal or
    /// round to 0, overflow, and the infinities.
    fn exp_inputs() -> Vec<f32> {
        let mut xs: Vec<f32> = (0..=40_000).map(|i| -200.0 + i as f32 * 0.00525).collect();
        xs.extend([
            0.0,
            -0.0,
            f32::NEG_INFINITY,
            f32::INFINITY,
            -87.336_55,
            -103.972_08,
            88.72,
        ]);
        while !xs.len().is_multiple_of(LANES) {
            xs.push(-1.0);
        }
        xs
    }

    #[test]
    fn ggml_expf_is_within_two_units_in_the_last_place() {
        for x in exp_inputs() {
            let (got, want) = (ggml_expf(x), f64::from(x).exp());
            if want < f64::from(f32::MIN_POSITIVE) {
                // Subnormal and zero results: within one step of the smallest subnormal.
                assert!(
                    (f64::from(got) - want).abs() <= 2e-45,
                    "e^{x} = {got:e}, want {want:e}"
                );
            } else if want <= f64::from(f32::MAX) {
                let ulp = f64::from(f32::EPSILON) * want;
                assert!(
                    (f64::from(got) - want).abs() <= 2.0 * ulp,
                    "e^{x} = {got}, want {want}"
                );
            } else {
                assert_eq!(got, f32::INFINITY, "e^{x}");
            }
        }
        assert_eq!(ggml_expf(0.0), 1.0);
        assert_eq!(ggml_expf(f32::NEG_INFINITY), 0.0);
    }

    /// Every tier's lanes give the scalar form's bits.
    #[test]
    fn every_tier_takes_the_exponential_with_the_scalar_bits() {
        let xs = exp_inputs();
        let want: Vec<u32> = xs.iter().map(|&x| ggml_expf(x).to_bits()).collect();
        let check = |name: &str, exp: &dyn Fn(&mut [f32; LANES])| {
            let mut got = xs.clone();
            for chunk in got.as_chunks_mut::<LANES>().0 {
                exp(chunk);
            }
            for ((x, g), w) in xs.iter().zip(&got).zip(&want) {
                assert_eq!(g.to_bits(), *w, "{name}: e^{x}");
            }
        };
        // SAFETY: portable lanes need nothing.
        check("portable", &|x| unsafe { PortableLanes::exp(x) });
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: AVX2 and FMA detected.
                check("avx2", &|x| unsafe { Avx2Lanes::exp(x) });
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: AVX-512 F detected.
                check("avx512", &|x| unsafe { Avx512Lanes::exp(x) });
            }
        }
    }

    /// The lanes' multiply-add rounds once, on every tier.
    #[test]
    fn every_tier_fuses_the_multiply_add() {
        let a: [f32; LANES] = std::array::from_fn(|l| 1.0 + f32::EPSILON * (l as f32 + 1.0));
        let c = [-1.0f32; LANES];
        let want: [f32; LANES] = std::array::from_fn(|l| a[l].mul_add(a[l], c[l]));
        let run = |name: &str, got: [f32; LANES]| {
            assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "{name}");
        };
        // SAFETY: portable lanes need nothing.
        run("portable", unsafe {
            PortableLanes::load(&a).mul_add(PortableLanes::load(&a), c)
        });
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            let mut out = [0f32; LANES];
            // SAFETY: AVX-512 F detected.
            unsafe {
                let a = Avx512Lanes::load(&a);
                a.mul_add(a, Avx512Lanes::load(&c)).store(&mut out);
            }
            run("avx512", out);
        }
    }
}
