//! Grouped-query attention over a key/value cache: the query heads that share one key/value head, for
//! a run of consecutive tokens of one sequence, attend together, so every cached key and value is
//! read and widened once for all of them.
//!
//! [`attend_reference`] is the plain definition (scores, a softmax in f64, the weighted sum of
//! values), kept for tests. The fast form, which every tier compiles with its own instruction set
//! ([`attend_fast`]), takes the keys in blocks of [`KEY_BLOCK`] positions counted from position 0,
//! widened to f32 and transposed, so that one query row's scores for a whole block are plain vector
//! multiply-adds (each score summed over the head in order, whatever else shares the block); then an
//! online softmax with one rescale per block and a vectorizable `exp`, and the weighted values summed
//! in f32. A query row's result therefore has the same bits whichever tokens and heads share its call:
//! batching and chunked prefill do not change it.
//!
//! Over an f16 cache the fast form is llama.cpp's CPU flash attention instead, step for step, in the
//! form llama.cpp picks by the size of the batch. Below [`TILED_MIN_TOKENS`] query tokens of a
//! sequence's forward call: the query rounded to f16, each score summed as ggml's AVX-512 f16 dot sums
//! it, the softmax updated key by key, and the weighted values kept in f16. From there on, its tiled
//! form, f32 throughout (the `tiled` module). Either gives llama.cpp's AVX-512 bits on every tier, and a row's
//! bits do not depend on which rows share its call.
//!
//! A sliding-window layer's query at position `p` sees only positions `p'` with `p - p' < window`
//! (llama.cpp's standard sliding window); the kernel skips the blocks before a call's first visible
//! position and the keys before each row's.

#![allow(unsafe_code)]

use std::cell::RefCell;

use half::{f16, slice::HalfFloatSliceExt};

mod tiled;

pub use tiled::TILED_MIN_TOKENS;
#[cfg(target_arch = "x86_64")]
use tiled::{Avx2Lanes, Avx512Lanes};
use tiled::{Lanes, PortableLanes};

/// Key positions per block of the fast kernel.
pub const KEY_BLOCK: usize = 64;

/// A value type of the key/value cache.
pub trait CacheValue: Copy + Send + Sync + 'static {
    /// Whether the fast kernel follows llama.cpp's flash attention over an f16 cache: the query
    /// rounded to f16, the softmax updated key by key, and the weighted sum of values kept in f16
    /// (rounded after every multiply-add and every rescale).
    const FLASH_F16: bool;

    /// Widens `src` into `dst` (of the same length).
    fn widen(src: &[Self], dst: &mut [f32]);
}

impl CacheValue for f32 {
    const FLASH_F16: bool = false;

    #[inline]
    fn widen(src: &[Self], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
}

impl CacheValue for f16 {
    const FLASH_F16: bool = true;

    #[inline]
    fn widen(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
}

/// The query heads that share one key/value head, for consecutive tokens of one sequence.
#[derive(Debug, Clone, Copy)]
pub struct GroupQueries<'a> {
    /// Token `t`'s head `h` (of this group) starts at `t * stride + h * head_dim`.
    pub q: &'a [f32],
    /// Elements from one token's queries to the next's.
    pub stride: usize,
    /// Consecutive tokens of the run.
    pub tokens: usize,
    /// Query heads in the group.
    pub heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// The first token's position: token `t` attends to positions `0..=first_pos + t` (the last
    /// `window` of them when there is a window).
    pub first_pos: usize,
    /// Factor of every score (`1 / sqrt(head_dim)`).
    pub scale: f32,
    /// Positions a query sees in a sliding-window layer (itself and the `window - 1` before it);
    /// `None` for global attention.
    pub window: Option<usize>,
    /// Whether the sequence's forward call feeds [`TILED_MIN_TOKENS`] tokens or more: over an f16
    /// cache llama.cpp then takes its tiled flash attention, and so does the fast kernel
    /// (the `tiled` module).
    pub tiled: bool,
}

impl GroupQueries<'_> {
    fn rows(&self) -> usize {
        self.tokens * self.heads
    }

    /// Where query row `r` (token `r / heads`, head `r % heads`) starts, in `q` and in the output.
    fn at(&self, r: usize) -> usize {
        (r / self.heads) * self.stride + (r % self.heads) * self.head_dim
    }

    /// Keys visible to the row of token `t`: positions `first_visible(t)..visible(t)`.
    fn visible(&self, t: usize) -> usize {
        self.first_pos + t + 1
    }

    /// The first position the row of token `t` sees.
    fn first_visible(&self, t: usize) -> usize {
        self.window
            .map_or(0, |window| self.visible(t).saturating_sub(window))
    }

    /// The blocks of keys some row of the call sees, as `(start, positions)`. Blocks stay counted
    /// from position 0 so that a row's blocks do not depend on its call.
    fn key_blocks(&self) -> impl Iterator<Item = (usize, usize)> {
        let total = self.visible(self.tokens - 1);
        let first_block = self.first_visible(0) / KEY_BLOCK * KEY_BLOCK;
        (first_block..total)
            .step_by(KEY_BLOCK)
            .map(move |start| (start, (total - start).min(KEY_BLOCK)))
    }
}

/// One key/value head of one sequence's cache.
#[derive(Clone, Copy)]
pub struct CachedHead<'a, T> {
    /// The cache's keys (of every head and position).
    pub keys: &'a [T],
    /// The cache's values, laid out as the keys.
    pub values: &'a [T],
    /// The element offset, in `keys` and `values`, of position `j`'s row of this head.
    pub offset: &'a (dyn Fn(usize) -> usize + Sync),
}

/// The definition: for every row, softmax of the scaled scores over its visible positions, then the
/// weighted sum of their values, in f64. Writes each row at the same place as its query (`out` laid
/// out as `queries.q`).
pub fn attend_reference<T: CacheValue>(
    queries: &GroupQueries<'_>,
    kv: &CachedHead<'_, T>,
    out: &mut [f32],
) {
    let hd = queries.head_dim;
    let (mut key, mut value) = (vec![0f32; hd], vec![0f32; hd]);
    for r in 0..queries.rows() {
        let at = queries.at(r);
        let query = &queries.q[at..at + hd];
        let t = r / queries.heads;
        let first = queries.first_visible(t);
        let mut weights: Vec<f64> = (first..queries.visible(t))
            .map(|j| {
                let o = (kv.offset)(j);
                T::widen(&kv.keys[o..o + hd], &mut key);
                let dot: f64 = query
                    .iter()
                    .zip(&key)
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum();
                dot * f64::from(queries.scale)
            })
            .collect();
        let max = weights.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut sum = 0.0;
        for w in &mut weights {
            *w = (*w - max).exp();
            sum += *w;
        }
        let mut acc = vec![0f64; hd];
        for (j, w) in (first..).zip(&weights) {
            let o = (kv.offset)(j);
            T::widen(&kv.values[o..o + hd], &mut value);
            for (a, &v) in acc.iter_mut().zip(&value) {
                *a += w / sum * f64::from(v);
            }
        }
        for (o, a) in out[at..at + hd].iter_mut().zip(&acc) {
            *o = *a as f32;
        }
    }
}

/// Per-thread buffers of the fast kernel, grown on a thread's first use and reused after.
#[derive(Default)]
pub(crate) struct Scratch {
    /// Scaled query rows, `rows x head_dim`.
    queries: Vec<f32>,
    /// One block of keys, transposed: `head_dim x KEY_BLOCK` (the f32 cache's path, and the flash
    /// path's for heads of whole [`FLASH_STEP`]s).
    keys_t: Vec<f32>,
    /// One block of keys as rows: `KEY_BLOCK x head_dim` (the flash path's for other heads, and the
    /// tiled form's).
    keys: Vec<f32>,
    /// One block of values: `KEY_BLOCK x head_dim`.
    values: Vec<f32>,
    /// One widened key row.
    key: Vec<f32>,
    /// Per row: the running maximum score and the running sum of weights.
    max: Vec<f32>,
    sum: Vec<f32>,
    /// Per row: the running weighted sum of values, `rows x head_dim`.
    acc: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` with this thread's scratch (a fresh one if a caller up the stack holds it).
pub(crate) fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut scratch) => f(&mut scratch),
        Err(_) => f(&mut Scratch::default()),
    })
}

/// Rounds f32 values to the nearest f16 (ties to even), in place.
pub(crate) trait HalfRounding {
    /// # Safety
    /// The CPU must support the instructions the implementation uses.
    unsafe fn round(x: &mut [f32]);
}

/// Rounding in software, on any CPU.
pub(crate) struct SoftwareRounding;

impl HalfRounding for SoftwareRounding {
    #[inline(always)]
    unsafe fn round(x: &mut [f32]) {
        for v in x {
            *v = f16::from_f32(*v).to_f32();
        }
    }
}

/// Rounding with F16C, eight lanes at a time.
#[cfg(target_arch = "x86_64")]
pub(crate) struct F16cRounding;

#[cfg(target_arch = "x86_64")]
impl HalfRounding for F16cRounding {
    #[inline(always)]
    unsafe fn round(x: &mut [f32]) {
        use std::arch::x86_64::*;
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: the chunk holds exactly 8 f32 values (unaligned loads and stores); the caller
            // guarantees F16C and AVX.
            unsafe {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(c.as_ptr()));
                _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
            }
        }
        // SAFETY: software rounding has no requirements.
        unsafe { SoftwareRounding::round(chunks.into_remainder()) };
    }
}

/// Rounding with AVX-512, sixteen lanes at a time.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx512Rounding;

#[cfg(target_arch = "x86_64")]
impl HalfRounding for Avx512Rounding {
    #[inline(always)]
    unsafe fn round(x: &mut [f32]) {
        use std::arch::x86_64::*;
        let mut chunks = x.chunks_exact_mut(16);
        for c in &mut chunks {
            // SAFETY: the chunk holds exactly 16 f32 values (unaligned loads and stores); the caller
            // guarantees AVX-512 F.
            unsafe {
                let h = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm512_loadu_ps(c.as_ptr()));
                _mm512_storeu_ps(c.as_mut_ptr(), _mm512_cvtph_ps(h));
            }
        }
        // SAFETY: F16C comes with the AVX-512 tier.
        unsafe { F16cRounding::round(chunks.into_remainder()) };
    }
}

/// The fast kernel for head sizes it is compiled for (16, 32, 64, 128, 256), the reference for others.
/// The f32 cache's scores and weighted values are summed with separate multiplies and adds (never
/// fused), in the same order on every tier; the f16 cache's follow ggml's flash attention, fused
/// where it fuses. Either way a cache type gives the same bits on every tier.
///
/// # Safety
/// The CPU must support what `R` and `L` use.
#[inline(always)]
pub(crate) unsafe fn attend_fast<T: CacheValue, R: HalfRounding, L: Lanes>(
    queries: &GroupQueries<'_>,
    kv: &CachedHead<'_, T>,
    out: &mut [f32],
    scratch: &mut Scratch,
) {
    // SAFETY: passed on from the caller.
    unsafe {
        match queries.head_dim {
            16 => blocked::<T, R, L, 16>(queries, kv, out, scratch),
            32 => blocked::<T, R, L, 32>(queries, kv, out, scratch),
            64 => blocked::<T, R, L, 64>(queries, kv, out, scratch),
            128 => blocked::<T, R, L, 128>(queries, kv, out, scratch),
            256 => blocked::<T, R, L, 256>(queries, kv, out, scratch),
            _ => attend_reference(queries, kv, out),
        }
    }
}

/// # Safety
/// The CPU must support what `R` and `L` use.
#[inline(always)]
unsafe fn blocked<T: CacheValue, R: HalfRounding, L: Lanes, const HD: usize>(
    queries: &GroupQueries<'_>,
    kv: &CachedHead<'_, T>,
    out: &mut [f32],
    s: &mut Scratch,
) {
    if T::FLASH_F16 && queries.tiled {
        // SAFETY: passed on from the caller.
        unsafe { tiled::attend::<T, L, HD>(queries, kv, out, s) };
        return;
    }
    let rows = queries.rows();
    s.queries.resize(rows * HD, 0.0);
    for r in 0..rows {
        let at = queries.at(r);
        for (d, &q) in s.queries[r * HD..(r + 1) * HD]
            .iter_mut()
            .zip(&queries.q[at..at + HD])
        {
            *d = if T::FLASH_F16 {
                f16::from_f32(q).to_f32()
            } else {
                q * queries.scale
            };
        }
    }
    s.acc.clear();
    s.acc.resize(rows * HD, 0.0);
    s.max.clear();
    s.max.resize(rows, f32::NEG_INFINITY);
    s.sum.clear();
    s.sum.resize(rows, 0.0);
    if KeyLayout::key_by_key::<T, HD>() == KeyLayout::Rows {
        s.keys.resize(KEY_BLOCK * HD, 0.0);
    } else {
        s.keys_t.resize(HD * KEY_BLOCK, 0.0);
    }
    s.values.resize(KEY_BLOCK * HD, 0.0);
    s.key.resize(HD, 0.0);

    for (start, n) in queries.key_blocks() {
        load_block::<T, HD>(kv, (start, n), KeyLayout::key_by_key::<T, HD>(), s);
        for t in 0..queries.tokens {
            let visible = queries.visible(t);
            let first = queries.first_visible(t);
            if visible <= start || first >= start + n {
                continue;
            }
            let keys = Visible {
                from: first.saturating_sub(start),
                live: (visible - start).min(n),
            };
            let rows = t * queries.heads..(t + 1) * queries.heads;
            if T::FLASH_F16 {
                // SAFETY: passed on from the caller.
                unsafe { token_flash::<R, HD>(rows, queries.scale, keys, s) };
                continue;
            }
            for r in rows {
                let state = RowState {
                    max: &mut s.max[r],
                    sum: &mut s.sum[r],
                    acc: &mut s.acc[r * HD..(r + 1) * HD],
                };
                row_block::<HD>(&s.queries[r * HD..], &s.keys_t, &s.values, keys, state);
            }
        }
    }
    write_normalized::<HD>(queries, s, out);
}

/// Writes each row's weighted sum of values divided by its sum of weights (zero for a row that saw
/// no key) at the row's place in `out`.
#[inline(always)]
fn write_normalized<const HD: usize>(queries: &GroupQueries<'_>, s: &Scratch, out: &mut [f32]) {
    for r in 0..queries.rows() {
        let at = queries.at(r);
        let inv = if s.sum[r] > 0.0 { 1.0 / s.sum[r] } else { 0.0 };
        for (o, &a) in out[at..at + HD]
            .iter_mut()
            .zip(&s.acc[r * HD..(r + 1) * HD])
        {
            *o = a * inv;
        }
    }
}

/// How a loaded block holds its keys in the scratch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyLayout {
    /// `KEY_BLOCK x head_dim`, in [`Scratch::keys`].
    Rows,
    /// `head_dim x KEY_BLOCK`, in [`Scratch::keys_t`].
    Transposed,
}

impl KeyLayout {
    /// The layout of the key-by-key kernels: transposed, but as rows for the flash path of a head
    /// that is not a multiple of [`FLASH_STEP`].
    const fn key_by_key<T: CacheValue, const HD: usize>() -> Self {
        if T::FLASH_F16 && !flash_transposed::<HD>() {
            Self::Rows
        } else {
            Self::Transposed
        }
    }
}

/// Widens positions `start..start + n` into the scratch: values as rows, keys in `layout`.
#[inline(always)]
fn load_block<T: CacheValue, const HD: usize>(
    kv: &CachedHead<'_, T>,
    (start, n): (usize, usize),
    layout: KeyLayout,
    s: &mut Scratch,
) {
    for k in 0..n {
        let o = (kv.offset)(start + k);
        T::widen(&kv.values[o..o + HD], &mut s.values[k * HD..(k + 1) * HD]);
        if layout == KeyLayout::Rows {
            T::widen(&kv.keys[o..o + HD], &mut s.keys[k * HD..(k + 1) * HD]);
            continue;
        }
        T::widen(&kv.keys[o..o + HD], &mut s.key);
        put_transposed(&s.key, k, &mut s.keys_t);
    }
}

/// Writes `key` as column `k` of a block of keys held transposed (`head_dim x KEY_BLOCK`).
#[inline(always)]
fn put_transposed(key: &[f32], k: usize, keys_t: &mut [f32]) {
    for (d, &v) in key.iter().enumerate() {
        keys_t[d * KEY_BLOCK + k] = v;
    }
}

/// The keys of a loaded block a row sees: `from..live` (block-relative).
#[derive(Debug, Clone, Copy)]
struct Visible {
    from: usize,
    live: usize,
}

/// One query row's running softmax state.
struct RowState<'a> {
    max: &'a mut f32,
    sum: &'a mut f32,
    acc: &'a mut [f32],
}

/// Lanes of the scalar dot product ([`super::scalar::vec_dot_f32`]): a score is summed as it sums,
/// in eight partial sums over every eighth element, then those in order.
const DOT_LANES: usize = 8;
/// Keys scored together, one vector register per partial sum.
const KEY_CHUNK: usize = 16;

/// One query row's scores against a block of transposed keys, each with the bits of the scalar dot
/// product of the query and that key.
#[inline(always)]
fn block_scores<const HD: usize>(query: &[f32; HD], keys_t: &[f32]) -> [f32; KEY_BLOCK] {
    let mut scores = [0f32; KEY_BLOCK];
    for (chunk, out) in scores.chunks_exact_mut(KEY_CHUNK).enumerate() {
        let first = chunk * KEY_CHUNK;
        let mut lanes = [[0f32; KEY_CHUNK]; DOT_LANES];
        for (c, qs) in query.chunks_exact(DOT_LANES).enumerate() {
            for (l, (lane, &q)) in lanes.iter_mut().zip(qs).enumerate() {
                let d = c * DOT_LANES + l;
                let Some(keys) = keys_t[d * KEY_BLOCK + first..].first_chunk::<KEY_CHUNK>() else {
                    return scores;
                };
                for (a, &k) in lane.iter_mut().zip(keys) {
                    *a += q * k;
                }
            }
        }
        for (j, o) in out.iter_mut().enumerate() {
            *o = lanes.iter().fold(0.0, |sum, lane| sum + lane[j]);
        }
    }
    scores
}

/// Lanes of ggml's AVX-512 f16 dot product (`ggml_vec_dot_f16`): four accumulators of sixteen.
const FLASH_LANES: usize = 16;
const FLASH_ACCUMULATORS: usize = 4;
const FLASH_STEP: usize = FLASH_LANES * FLASH_ACCUMULATORS;

/// One score of the flash path, summed as ggml's AVX-512 `ggml_vec_dot_f16` sums it: over steps of
/// 64 values, value `64i + 16j + l` fused into accumulator `j`'s lane `l`; the accumulators added
/// `(0 + 2) + (1 + 3)`, the sixteen lanes reduced as `_mm512_reduce_add_ps` does (halves, quarters,
/// then pairs); the values past the last whole step added in f64.
#[inline(always)]
fn flash_score<const HD: usize>(query: &[f32; HD], key: &[f32]) -> f32 {
    let mut acc = [[0f32; FLASH_LANES]; FLASH_ACCUMULATORS];
    let whole = HD / FLASH_STEP * FLASH_STEP;
    for (qs, ks) in query[..whole]
        .chunks_exact(FLASH_STEP)
        .zip(key[..whole].chunks_exact(FLASH_STEP))
    {
        for (j, a) in acc.iter_mut().enumerate() {
            let at = j * FLASH_LANES;
            for (l, lane) in a.iter_mut().enumerate() {
                *lane = ks[at + l].mul_add(qs[at + l], *lane);
            }
        }
    }
    let mut lanes = [0f32; FLASH_LANES];
    for (l, lane) in lanes.iter_mut().enumerate() {
        *lane = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    let eighths: [f32; 8] = std::array::from_fn(|i| lanes[i + 8] + lanes[i]);
    let quarters: [f32; 4] = std::array::from_fn(|i| eighths[i + 4] + eighths[i]);
    let reduced = (quarters[0] + quarters[2]) + (quarters[1] + quarters[3]);
    let mut sum = f64::from(reduced);
    for (&q, &k) in query[whole..].iter().zip(&key[whole..HD]) {
        sum += f64::from(k * q);
    }
    sum as f32
}

/// Whether the flash path holds a block's keys transposed, and scores [`KEY_CHUNK`] keys at once
/// ([`flash_scores_transposed`]): for heads of whole [`FLASH_STEP`]s, whose scores have no part
/// summed in f64.
const fn flash_transposed<const HD: usize>() -> bool {
    HD.is_multiple_of(FLASH_STEP)
}

/// One query row's flash scores against the visible keys of a block (in the scratch's layout for
/// `HD`: transposed or rows); the others are left at zero, or hold what their chunk's arithmetic gave,
/// and are never read.
#[inline(always)]
fn flash_scores<const HD: usize>(query: &[f32; HD], block: &FlashBlock<'_>) -> [f32; KEY_BLOCK] {
    if flash_transposed::<HD>() {
        flash_scores_transposed::<HD>(query, block.keys_t, block.visible)
    } else {
        flash_scores_by_key::<HD>(query, block.keys, block.visible)
    }
}

/// [`flash_scores`] a key at a time, over keys held as rows of `HD`.
#[inline(always)]
fn flash_scores_by_key<const HD: usize>(
    query: &[f32; HD],
    keys: &[f32],
    visible: Visible,
) -> [f32; KEY_BLOCK] {
    let mut scores = [0f32; KEY_BLOCK];
    let (rows, _) = keys.as_chunks::<HD>();
    for (score, key) in scores
        .iter_mut()
        .zip(rows)
        .take(visible.live)
        .skip(visible.from)
    {
        *score = flash_score::<HD>(query, key);
    }
    scores
}

/// [`flash_scores`] of [`KEY_CHUNK`] keys at once, over keys transposed (`HD x KEY_BLOCK`), with the
/// bits of [`flash_score`] for each: the same fused multiply-adds into the same accumulator lanes and
/// the same tree of additions, taken for each key in its own vector lane instead of across a vector.
/// Every product of an f16 query value and an f16 key value is exact in f32, so a lane's first fused
/// multiply-add is its product, whichever form forms it.
#[inline(always)]
fn flash_scores_transposed<const HD: usize>(
    query: &[f32; HD],
    keys_t: &[f32],
    visible: Visible,
) -> [f32; KEY_BLOCK] {
    let mut scores = [0f32; KEY_BLOCK];
    let Visible { from, live } = visible;
    for (chunk, out) in scores.chunks_exact_mut(KEY_CHUNK).enumerate() {
        let first = chunk * KEY_CHUNK;
        if first + KEY_CHUNK <= from || first >= live {
            continue;
        }
        // `lanes[l][c]`: lane `l` of key `first + c`'s dot, its four accumulators added.
        let mut lanes = [[0f32; KEY_CHUNK]; FLASH_LANES];
        for (l, lane) in lanes.iter_mut().enumerate() {
            let mut acc = [[0f32; KEY_CHUNK]; FLASH_ACCUMULATORS];
            for step in 0..HD / FLASH_STEP {
                for (j, a) in acc.iter_mut().enumerate() {
                    let d = step * FLASH_STEP + j * FLASH_LANES + l;
                    let q = query[d];
                    let Some(keys) = keys_t[d * KEY_BLOCK + first..].first_chunk::<KEY_CHUNK>()
                    else {
                        return scores;
                    };
                    for (a, &k) in a.iter_mut().zip(keys) {
                        *a = k.mul_add(q, *a);
                    }
                }
            }
            for (c, v) in lane.iter_mut().enumerate() {
                *v = (acc[0][c] + acc[2][c]) + (acc[1][c] + acc[3][c]);
            }
        }
        let eighths: [[f32; KEY_CHUNK]; 8] =
            std::array::from_fn(|i| std::array::from_fn(|c| lanes[i + 8][c] + lanes[i][c]));
        let quarters: [[f32; KEY_CHUNK]; 4] =
            std::array::from_fn(|i| std::array::from_fn(|c| eighths[i + 4][c] + eighths[i][c]));
        for (c, o) in out.iter_mut().enumerate() {
            *o = (quarters[0][c] + quarters[2][c]) + (quarters[1][c] + quarters[3][c]);
        }
    }
    scores
}

/// The query rows of one token (its heads of the group) against the block of keys in the scratch,
/// as llama.cpp's CPU flash attention does it: taken two or three rows at a time, so that their
/// chains of rounded sums overlap.
///
/// # Safety
/// The CPU must support what `R` uses.
#[inline(always)]
unsafe fn token_flash<R: HalfRounding, const HD: usize>(
    rows: std::ops::Range<usize>,
    scale: f32,
    keys: Visible,
    s: &mut Scratch,
) {
    let step = if rows.len().is_multiple_of(3) {
        3
    } else if rows.len().is_multiple_of(2) {
        2
    } else {
        1
    };
    for first in rows.step_by(step) {
        let block = FlashBlock {
            keys: &s.keys,
            keys_t: &s.keys_t,
            values: &s.values,
            scale,
            visible: keys,
        };
        let queries = &s.queries[first * HD..(first + step) * HD];
        let max = &mut s.max[first..first + step];
        let sum = &mut s.sum[first..first + step];
        let acc = &mut s.acc[first * HD..(first + step) * HD];
        // SAFETY: passed on from the caller.
        unsafe {
            match step {
                3 => rows_flash::<R, HD, 3>(&block, queries, max, sum, acc),
                2 => rows_flash::<R, HD, 2>(&block, queries, max, sum, acc),
                _ => rows_flash::<R, HD, 1>(&block, queries, max, sum, acc),
            }
        }
    }
}

/// A row's key-by-key softmax over one block, computed ahead of the sums of values: at key `k`,
/// either a new maximum (`rescale[k] = e^(old max - score)`, `weight[k] = 1`) or not
/// (`rescale[k] = 1`, `weight[k] = e^(score - max)`). The exponentials of a block are taken together,
/// off the sums' critical path, with the bits of the C library's `expf` as llama.cpp takes them (a
/// faster approximation moves greedy tokens away from llama.cpp's on some kernel tiers), inlined.
#[derive(Clone, Copy)]
struct SoftmaxSteps {
    rescale: [f32; KEY_BLOCK],
    weight: [f32; KEY_BLOCK],
    /// The maximum after the block.
    max: f32,
}

impl Default for SoftmaxSteps {
    fn default() -> Self {
        Self {
            rescale: [1.0; KEY_BLOCK],
            weight: [1.0; KEY_BLOCK],
            max: f32::NEG_INFINITY,
        }
    }
}

impl SoftmaxSteps {
    /// The steps of the keys `from..live` of a block, from the running maximum `max`; the others
    /// change nothing.
    #[inline(always)]
    fn new(scores: &[f32; KEY_BLOCK], scale: f32, mut max: f32, keys: Visible) -> Self {
        let mut exponent = [0f32; KEY_BLOCK];
        let mut raised = [false; KEY_BLOCK];
        let Visible { from, live } = keys;
        for (k, &score) in scores.iter().enumerate().take(live).skip(from) {
            let s = score * scale;
            if s > max {
                exponent[k] = max - s;
                raised[k] = true;
                max = s;
            } else {
                exponent[k] = s - max;
            }
        }
        let mut steps = Self {
            max,
            ..Self::default()
        };
        for k in from..live.min(KEY_BLOCK) {
            let e = super::expf::expf(exponent[k]);
            steps.rescale[k] = if raised[k] { e } else { 1.0 };
            steps.weight[k] = if raised[k] { 1.0 } else { e };
        }
        steps
    }
}

/// One block of widened keys and values, as flash attention's rows see it.
struct FlashBlock<'a> {
    /// Widened keys as rows (heads that are not a multiple of [`FLASH_STEP`]).
    keys: &'a [f32],
    /// Widened keys transposed (heads of whole [`FLASH_STEP`]s).
    keys_t: &'a [f32],
    values: &'a [f32],
    scale: f32,
    /// Keys visible to the rows.
    visible: Visible,
}

/// `G` query rows (`G x HD` values, with their running maxima, sums and f16 sums of values)
/// against one block, as llama.cpp's `flash_attn_ext_f16_one_chunk` does for each: key by key, a
/// new maximum rescales the f16 sum of values, and each value is added with its weight by one fused
/// multiply-add rounded to f16.
///
/// # Safety
/// The CPU must support what `R` uses.
#[inline(always)]
unsafe fn rows_flash<R: HalfRounding, const HD: usize, const G: usize>(
    block: &FlashBlock<'_>,
    queries: &[f32],
    max: &mut [f32],
    sum: &mut [f32],
    acc: &mut [f32],
) {
    let (Some(max), Some(sum)) = (max.first_chunk_mut::<G>(), sum.first_chunk_mut::<G>()) else {
        return;
    };
    let (queries, _) = queries.as_chunks::<HD>();
    let (acc, _) = acc.as_chunks_mut::<HD>();
    if queries.len() < G || acc.len() < G {
        return;
    }
    let mut steps = [SoftmaxSteps::default(); G];
    let mut sums = [[0f32; HD]; G];
    for g in 0..G {
        let scores = flash_scores::<HD>(&queries[g], block);
        steps[g] = SoftmaxSteps::new(&scores, block.scale, max[g], block.visible);
        sums[g] = acc[g];
    }
    let (values, _) = block.values.as_chunks::<HD>();
    let Visible { from, live } = block.visible;
    for (k, value) in values.iter().enumerate().take(live).skip(from) {
        for g in 0..G {
            let (rescale, weight) = (steps[g].rescale[k], steps[g].weight[k]);
            if rescale != 1.0 {
                for a in &mut sums[g] {
                    *a *= rescale;
                }
                // SAFETY: passed on from the caller.
                unsafe { R::round(&mut sums[g]) };
            }
            for (a, &v) in sums[g].iter_mut().zip(value) {
                *a = v.mul_add(weight, *a);
            }
            // SAFETY: passed on from the caller.
            unsafe { R::round(&mut sums[g]) };
            // Fused, as GCC contracts ggml's `S = S*ms + vs`.
            sum[g] = sum[g].mul_add(rescale, weight);
        }
    }
    for g in 0..G {
        max[g] = steps[g].max;
    }
    acc[..G].copy_from_slice(&sums);
}

/// One query row against one block of keys of which `keys` are visible to it.
#[inline(always)]
fn row_block<const HD: usize>(
    query: &[f32],
    keys_t: &[f32],
    values: &[f32],
    keys: Visible,
    state: RowState<'_>,
) {
    let Visible { from, live } = keys;
    let (Some(query), Some(acc)) = (query.first_chunk::<HD>(), state.acc.first_chunk_mut::<HD>())
    else {
        return;
    };
    let mut scores = block_scores::<HD>(query, keys_t);
    for (k, s) in scores.iter_mut().enumerate() {
        if k < from || k >= live {
            *s = f32::NEG_INFINITY;
        }
    }
    let new_max = lane_max(&scores).max(*state.max);
    let mut weights = [0f32; KEY_BLOCK];
    for (k, (w, &s)) in weights.iter_mut().zip(&scores).enumerate() {
        let e = exp_approx(s - new_max);
        *w = if (from..live).contains(&k) { e } else { 0.0 };
    }
    let correction = exp_approx(*state.max - new_max);
    *state.sum = *state.sum * correction + lane_sum(&weights);
    *state.max = new_max;
    let mut sums = *acc;
    if correction != 1.0 {
        for a in &mut sums {
            *a *= correction;
        }
    }
    for (k, &w) in weights.iter().enumerate().take(live).skip(from) {
        let Some(value) = values[k * HD..].first_chunk::<HD>() else {
            return;
        };
        for (a, &v) in sums.iter_mut().zip(value) {
            *a += w * v;
        }
    }
    *acc = sums;
}

/// Lanes of the block reductions: sixteen partial results combined at the end, so the loops vectorize.
const LANES: usize = 16;

#[inline(always)]
fn lane_max(x: &[f32; KEY_BLOCK]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    for chunk in x.chunks_exact(LANES) {
        for (l, &v) in lanes.iter_mut().zip(chunk) {
            *l = if v > *l { v } else { *l };
        }
    }
    lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

#[inline(always)]
fn lane_sum(x: &[f32; KEY_BLOCK]) -> f32 {
    let mut lanes = [0f32; LANES];
    for chunk in x.chunks_exact(LANES) {
        for (l, &v) in lanes.iter_mut().zip(chunk) {
            *l += v;
        }
    }
    lanes.iter().sum()
}

/// `e^x` to about one part in 10^7 for `x <= 0` (attention's only case), with no branches or calls so
/// that loops over it vectorize: `2^n * p(r)` with `x = n ln 2 + r` (Cody-Waite reduction, Cephes'
/// polynomial). Inputs below -87 give about 1e-38 instead of 0.
#[inline(always)]
pub(crate) fn exp_approx(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2_E + 0.5).floor();
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    let scale = f32::from_bits((((n as i32) + 127) as u32) << 23);
    y * scale
}

/// The fast kernel on the baseline instruction set.
pub(crate) fn attend_f16_portable(
    q: &GroupQueries<'_>,
    kv: &CachedHead<'_, f16>,
    out: &mut [f32],
    scratch: &mut Scratch,
) {
    // SAFETY: software rounding has no requirements.
    unsafe { attend_fast::<f16, SoftwareRounding, PortableLanes>(q, kv, out, scratch) };
}

/// The fast kernel on the baseline instruction set.
pub(crate) fn attend_f32_portable(
    q: &GroupQueries<'_>,
    kv: &CachedHead<'_, f32>,
    out: &mut [f32],
    scratch: &mut Scratch,
) {
    // SAFETY: the f32 cache rounds nothing.
    unsafe { attend_fast::<f32, SoftwareRounding, PortableLanes>(q, kv, out, scratch) };
}

/// The fast kernel for one cache type compiled with a SIMD tier's instruction set.
macro_rules! simd_tier {
    ($name:ident, $value:ty, $rounding:ty, $lanes:ty, $features:literal, $doc:literal) => {
        #[doc = $doc]
        ///
        /// # Safety
        /// The CPU must support the features this function is compiled with.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name(
            q: &GroupQueries<'_>,
            kv: &CachedHead<'_, $value>,
            out: &mut [f32],
            scratch: &mut Scratch,
        ) {
            // SAFETY: the rounding's instructions are among the features the caller guarantees.
            unsafe { attend_fast::<$value, $rounding, $lanes>(q, kv, out, scratch) };
        }
    };
}

simd_tier!(
    attend_f16_avx2,
    f16,
    F16cRounding,
    Avx2Lanes,
    "avx2,fma,f16c",
    "The fast kernel for AVX2 and FMA."
);
simd_tier!(
    attend_f32_avx2,
    f32,
    F16cRounding,
    Avx2Lanes,
    "avx2,fma,f16c",
    "The fast kernel for AVX2 and FMA."
);
simd_tier!(
    attend_f16_avx512,
    f16,
    Avx512Rounding,
    Avx512Lanes,
    "avx512f,avx512bw,avx512vl,avx2,fma,f16c",
    "The fast kernel for AVX-512."
);
simd_tier!(
    attend_f32_avx512,
    f32,
    Avx512Rounding,
    Avx512Lanes,
    "avx512f,avx512bw,avx512vl,avx2,fma,f16c",
    "The fast kernel for AVX-512."
);

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng, rngs::StdRng};

    use super::*;
    use crate::kernels::{cpu, dispatch::KernelTable};

    /// A cache of `positions` rows of `kv_heads` heads, stored in a scrambled position order (as
    /// paged blocks are), with its offset function's permutation.
    struct Case {
        q: Vec<f32>,
        keys: Vec<f32>,
        values: Vec<f32>,
        order: Vec<usize>,
        kv_width: usize,
    }

    fn case(seed: u64, tokens: usize, stride: usize, positions: usize, kv_width: usize) -> Case {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut random = |n: usize, scale: f32| -> Vec<f32> {
            (0..n).map(|_| rng.random_range(-scale..scale)).collect()
        };
        let q = random(tokens * stride, 2.0);
        let keys = random(positions * kv_width, 2.0);
        let values = random(positions * kv_width, 1.0);
        let mut order: Vec<usize> = (0..positions).collect();
        order.reverse();
        order.swap(0, positions / 2);
        Case {
            q,
            keys,
            values,
            order,
            kv_width,
        }
    }

    fn close(got: &[f32], want: &[f32], tolerance: f32, what: &str) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= tolerance * (1.0 + w.abs()),
                "{what}: element {i} is {g}, want {w}"
            );
        }
    }

    /// Every tier against the reference and the portable kernel's bits, on both cache types, for head sizes with a fast form and
    /// one without, one token and several, positions inside the first key block and across several,
    /// global and sliding-window attention (windows inside one block, across blocks, wider than the
    /// positions so far).
    #[test]
    fn every_tier_matches_the_reference_and_the_portable_bits() {
        let shapes = [
            (64, 3, 1, 0, None),
            (64, 3, 1, 200, None),
            (64, 3, 17, 63, None),
            (64, 1, 5, 64, None),
            (32, 2, 9, 130, None),
            (128, 2, 3, 70, None),
            (48, 3, 4, 10, None),
            (256, 4, 3, 90, None),
            (256, 4, 1, 300, Some(100)),
            (64, 3, 17, 150, Some(70)),
            (64, 2, 20, 40, Some(10)),
            (32, 3, 1, 5, Some(64)),
            (256, 2, 12, 120, Some(1)),
            (48, 3, 6, 30, Some(7)),
        ];
        for (seed, &(hd, heads, tokens, first_pos, window)) in shapes.iter().enumerate() {
            for tiled in [false, true] {
                check_every_tier(seed as u64, (hd, heads, tokens, first_pos), window, tiled);
            }
        }
    }

    /// One shape of [`every_tier_matches_the_reference_and_the_portable_bits`].
    fn check_every_tier(
        seed: u64,
        (hd, heads, tokens, first_pos): (usize, usize, usize, usize),
        window: Option<usize>,
        tiled: bool,
    ) {
        {
            let stride = heads * hd + 8;
            let positions = first_pos + tokens;
            let kv_width = 2 * hd;
            let c = case(seed, tokens, stride, positions, kv_width);
            let offset = |j: usize| c.order[j] * c.kv_width + hd;
            let queries = GroupQueries {
                q: &c.q,
                stride,
                tokens,
                heads,
                head_dim: hd,
                first_pos,
                scale: 1.0 / (hd as f32).sqrt(),
                window,
                tiled,
            };
            let keys16: Vec<f16> = c.keys.iter().map(|&v| f16::from_f32(v)).collect();
            let values16: Vec<f16> = c.values.iter().map(|&v| f16::from_f32(v)).collect();
            let head32 = CachedHead {
                keys: &c.keys,
                values: &c.values,
                offset: &offset,
            };
            let head16 = CachedHead {
                keys: &keys16,
                values: &values16,
                offset: &offset,
            };
            let mut want32 = vec![0f32; tokens * stride];
            attend_reference(&queries, &head32, &mut want32);
            let mut want16 = vec![0f32; tokens * stride];
            attend_reference(&queries, &head16, &mut want16);
            let mut portable = vec![0f32; tokens * stride];
            with_scratch(|s| attend_f32_portable(&queries, &head32, &mut portable, s));
            let mut portable16 = vec![0f32; tokens * stride];
            with_scratch(|s| attend_f16_portable(&queries, &head16, &mut portable16, s));
            for tier in cpu::available_tiers() {
                let table = KernelTable::for_tier(tier).expect("available tier");
                let what = format!(
                    "{tier:?} head {hd}, {tokens} tokens from {first_pos}, window {window:?}, \
                     tiled {tiled}"
                );
                let mut got = vec![0f32; tokens * stride];
                table.attend_f32(&queries, &head32, &mut got);
                close(&got, &want32, 1e-4, &format!("{what}, f32 cache"));
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    portable.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{what}: the portable kernel's bits"
                );
                // The f16 sums of values follow llama.cpp, a few parts in 10^4 from the exact result;
                // its tiled form sums in f32.
                let mut got = vec![0f32; tokens * stride];
                table.attend_f16(&queries, &head16, &mut got);
                let tolerance = if tiled { 2e-5 } else { 3e-3 };
                close(&got, &want16, tolerance, &format!("{what}, f16 cache"));
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    portable16.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{what}: the portable kernel's bits over an f16 cache"
                );
            }
        }
    }

    /// The flash scores of keys held transposed, sixteen at a time, have the bits of the scores taken
    /// a key at a time, for every head size that takes that path and every visible range.
    #[test]
    fn transposed_flash_scores_have_the_bits_of_the_scores_by_key() {
        fn check<const HD: usize>(rng: &mut StdRng) {
            let half = |v: f32| f16::from_f32(v).to_f32();
            let query: [f32; HD] = std::array::from_fn(|_| half(rng.random_range(-3.0..3.0)));
            let keys: Vec<f32> = (0..KEY_BLOCK * HD)
                .map(|_| half(rng.random_range(-3.0..3.0)))
                .collect();
            let mut keys_t = vec![0f32; HD * KEY_BLOCK];
            for (k, key) in keys.chunks_exact(HD).enumerate() {
                put_transposed(key, k, &mut keys_t);
            }
            for (from, live) in [(0, KEY_BLOCK), (0, 1), (5, 37), (16, 32), (63, KEY_BLOCK)] {
                let visible = Visible { from, live };
                let by_key = flash_scores_by_key::<HD>(&query, &keys, visible);
                let transposed = flash_scores_transposed::<HD>(&query, &keys_t, visible);
                for k in from..live {
                    assert_eq!(
                        transposed[k].to_bits(),
                        by_key[k].to_bits(),
                        "head {HD}, key {k} of {from}..{live}: {} against {}",
                        transposed[k],
                        by_key[k]
                    );
                }
            }
        }
        let mut rng = StdRng::seed_from_u64(11);
        assert!(flash_transposed::<64>() && flash_transposed::<256>());
        assert!(!flash_transposed::<32>() && !flash_transposed::<48>());
        for _ in 0..20 {
            check::<64>(&mut rng);
            check::<128>(&mut rng);
            check::<256>(&mut rng);
        }
    }

    /// A query row's result has the same bits alone as in a block with other tokens.
    #[test]
    fn a_row_has_the_same_bits_alone_or_in_a_block() {
        let (hd, heads, tokens, first_pos) = (64, 3, 20, 50);
        let stride = heads * hd;
        let c = case(7, tokens, stride, first_pos + tokens, hd);
        let offset = |j: usize| c.order[j] * c.kv_width;
        let head = CachedHead {
            keys: &c.keys,
            values: &c.values,
            offset: &offset,
        };
        let block = GroupQueries {
            q: &c.q,
            stride,
            tokens,
            heads,
            head_dim: hd,
            first_pos,
            scale: 0.125,
            window: None,
            tiled: false,
        };
        rows_alone_match_the_block(&block, &[0, 13, 19], |q, out| {
            with_scratch(|s| attend_f32_portable(q, &head, out, s))
        });
    }

    /// A row of a sliding-window call has the same bits alone as in a block with other tokens, the
    /// block's first rows seeing keys its last rows do not.
    #[test]
    fn a_windowed_row_has_the_same_bits_alone_or_in_a_block() {
        let (hd, heads, tokens, first_pos, window) = (64, 2, 40, 100, 30);
        let stride = heads * hd;
        let c = case(11, tokens, stride, first_pos + tokens, hd);
        let offset = |j: usize| c.order[j] * c.kv_width;
        let keys16: Vec<f16> = c.keys.iter().map(|&v| f16::from_f32(v)).collect();
        let values16: Vec<f16> = c.values.iter().map(|&v| f16::from_f32(v)).collect();
        let head = CachedHead {
            keys: &keys16,
            values: &values16,
            offset: &offset,
        };
        let block = GroupQueries {
            q: &c.q,
            stride,
            tokens,
            heads,
            head_dim: hd,
            first_pos,
            scale: 0.125,
            window: Some(window),
            tiled: false,
        };
        for tiled in [false, true] {
            rows_alone_match_the_block(&GroupQueries { tiled, ..block }, &[0, 21, 39], |q, out| {
                with_scratch(|s| attend_f16_portable(q, &head, out, s))
            });
        }
    }

    /// Asserts that each of `rows` of `block`, attended alone by `attend`, has the bits it has when
    /// `attend` runs the whole block.
    fn rows_alone_match_the_block(
        block: &GroupQueries<'_>,
        rows: &[usize],
        attend: impl Fn(&GroupQueries<'_>, &mut [f32]),
    ) {
        let stride = block.stride;
        let mut together = vec![0f32; block.tokens * stride];
        attend(block, &mut together);
        for &t in rows {
            let alone = GroupQueries {
                q: &block.q[t * stride..],
                tokens: 1,
                first_pos: block.first_pos + t,
                ..*block
            };
            let mut out = vec![0f32; stride];
            attend(&alone, &mut out);
            assert_eq!(
                out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                together[t * stride..(t + 1) * stride]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>(),
                "token {t}, tiled {}",
                block.tiled
            );
        }
    }

    /// A query at position `p` with window `w` sees exactly positions `p - w + 1..=p`: its result is
    /// global attention over those positions alone, and keys and values before them (NaN here) are
    /// never used, on every tier and cache type.
    #[test]
    fn a_window_masks_every_position_before_it() {
        let (hd, heads, window) = (64, 2, 24);
        let stride = heads * hd;
        for (tokens, first_pos) in [(1, 100), (5, 60), (30, 23), (3, 0)] {
            let positions = first_pos + tokens;
            let mut c = case(3, tokens, stride, positions, hd);
            let lowest = (first_pos + 1).saturating_sub(window);
            for j in 0..lowest {
                let o = c.order[j] * c.kv_width;
                c.keys[o..o + hd].fill(f32::NAN);
                c.values[o..o + hd].fill(f32::NAN);
            }
            let offset = |j: usize| c.order[j] * c.kv_width;
            let keys16: Vec<f16> = c.keys.iter().map(|&v| f16::from_f32(v)).collect();
            let values16: Vec<f16> = c.values.iter().map(|&v| f16::from_f32(v)).collect();
            let windowed = GroupQueries {
                q: &c.q,
                stride,
                tokens,
                heads,
                head_dim: hd,
                first_pos,
                scale: 0.125,
                window: Some(window),
                tiled: false,
            };
            for t in 0..tokens {
                // The same row as a global query over its window's positions, renumbered from 0.
                let pos = first_pos + t;
                let from = (pos + 1).saturating_sub(window);
                let shifted = |j: usize| c.order[j + from] * c.kv_width;
                let global = GroupQueries {
                    q: &c.q[t * stride..],
                    tokens: 1,
                    first_pos: pos - from,
                    window: None,
                    ..windowed
                };
                let shifted32 = CachedHead {
                    keys: &c.keys,
                    values: &c.values,
                    offset: &shifted,
                };
                let shifted16 = CachedHead {
                    keys: &keys16,
                    values: &values16,
                    offset: &shifted,
                };
                let mut want = vec![0f32; stride];
                attend_reference(&global, &shifted32, &mut want);
                let mut want16 = vec![0f32; stride];
                attend_reference(&global, &shifted16, &mut want16);
                assert!(want.iter().all(|v| v.is_finite()), "position {pos}");
                for tier in cpu::available_tiers() {
                    let table = KernelTable::for_tier(tier).expect("available tier");
                    let what = format!("{tier:?} position {pos}, window {window}");
                    let head32 = CachedHead {
                        keys: &c.keys,
                        values: &c.values,
                        offset: &offset,
                    };
                    let mut got = vec![0f32; tokens * stride];
                    table.attend_f32(&windowed, &head32, &mut got);
                    close(
                        &got[t * stride..(t + 1) * stride],
                        &want,
                        1e-4,
                        &format!("{what}, f32 cache"),
                    );
                    let head16 = CachedHead {
                        keys: &keys16,
                        values: &values16,
                        offset: &offset,
                    };
                    for tiled in [false, true] {
                        let windowed = GroupQueries { tiled, ..windowed };
                        let mut got = vec![0f32; tokens * stride];
                        table.attend_f16(&windowed, &head16, &mut got);
                        close(
                            &got[t * stride..(t + 1) * stride],
                            &want16,
                            3e-3,
                            &format!("{what}, f16 cache, tiled {tiled}"),
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn exp_approx_is_within_two_parts_in_ten_million() {
        for i in 0..=20_000 {
            let x = -80.0 * i as f32 / 20_000.0;
            let (got, want) = (exp_approx(x), x.exp());
            assert!(
                ((got - want) / want).abs() < 2e-7,
                "exp({x}) = {got}, want {want}"
            );
        }
        assert_eq!(exp_approx(0.0), 1.0);
        assert!(exp_approx(f32::NEG_INFINITY) < 1e-37);
    }
}
