//! The one dispatch point for matrix products: activations are converted once per matmul to the type
//! the weights pair with (ggml's `vec_dot_type`), then every output row is a dot product.
//!
//! Work is split as the caller's `team::Split` says (fork-joins on the caller's rayon pool, or the
//! tasks of a forward pass's team); kernels never spawn threads. One token (decode) splits
//! over output rows; so do a few tokens, each through the single-row dots. More tokens of a quantized
//! type go through the tier's tiled kernels (register tiles of rows by tokens), split over blocks of
//! tokens when there are enough of them to share the weights' loads, otherwise over blocks of rows.

pub mod attention;
mod avx2;
mod avx512;
pub mod cpu;
pub mod dispatch;
pub mod expf;
pub mod k_numerics;
pub mod scalar;
mod tiles;
mod x86;

use half::{bf16, f16};
use rayon::prelude::*;

pub use self::tiles::OutLayout;
use self::{
    dispatch::KernelTable,
    k_numerics::{KPath, repacks},
};
use crate::{
    quant::{self, BlockQ8_0, BlockQ8_1, BlockQ8K, GgmlType, INTERLEAVED_ROWS},
    team::Split,
    weights::{Weight, WeightData},
};

/// Rows a task of a few tokens runs across every token at a time, kept in cache meanwhile.
const ROWS_PER_BLOCK: usize = 64;
/// Parallel tasks per thread of a product split over rows. Every task is claimed from one shared
/// atomic word, which moves between the cores' caches at each claim: with the model's 576-row
/// matrices in tasks of 64 rows, claiming cost a quarter of a two-thread decode step, so a product
/// split over rows takes one even share per thread instead (one-token products over large matrices
/// excepted: [`decode_rows_per_task`]).
const TASKS_PER_THREAD: usize = 1;

/// Tokens from which a quantized product goes through the tiled kernels. Below it the tiles' fixed
/// cost (each row tile's scales unpacked, token tiles half empty) outweighs sharing the loads, and
/// each token takes the single-row dots over blocks of rows kept in cache (a decode step of a few
/// requests ran 1.1-1.4x faster so at two to six requests on the model's 576-wide layers).
const MIN_TILED_TOKENS: usize = 8;

/// Most tokens per parallel task of a tiled product: the task's activations stay in the second-level
/// cache while every weight row passes over them.
const TOKENS_PER_TASK: usize = 128;
/// Fewest tokens per thread for a tiled product to split over tokens: each task then reads every
/// weight row, which pays only when enough tokens share each load.
const MIN_TOKENS_PER_THREAD: usize = 16;

/// Reusable buffers for converted activations.
#[derive(Default)]
pub struct MatmulScratch {
    f16: Vec<f16>,
    bf16: Vec<bf16>,
    q8_0: Vec<BlockQ8_0>,
    q8_1: Vec<BlockQ8_1>,
    q8_k: Vec<BlockQ8K>,
    transposed: Vec<f32>,
}

/// Activations converted for one weight type.
enum Converted<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
    Q8_0(&'a [BlockQ8_0]),
    Q8_1(&'a [BlockQ8_1]),
    Q8K(&'a [BlockQ8K]),
}

/// Converts `x` (rows of `w.cols`) for `w`'s type; the quantized types quantize the rows in parallel
/// on the pool when there are several (on a team, where passes are small, the caller does them).
fn convert<'a>(
    w: &Weight,
    x: &'a [f32],
    split: Split<'_>,
    scratch: &'a mut MatmulScratch,
) -> Converted<'a> {
    let parallel = matches!(split, Split::Pool);
    match &w.data {
        WeightData::F32(_) => Converted::F32(x),
        WeightData::F16(_) => {
            scratch.f16.clear();
            scratch.f16.extend(x.iter().map(|&v| f16::from_f32(v)));
            Converted::F16(&scratch.f16)
        }
        WeightData::Bf16(_) => {
            scratch.bf16.clear();
            scratch.bf16.extend(x.iter().map(|&v| bf16::from_f32(v)));
            Converted::Bf16(&scratch.bf16)
        }
        WeightData::Q8_0(_)
        | WeightData::Q8_0Interleaved(_)
        | WeightData::Q4_0(_)
        | WeightData::Q4_0Interleaved(_)
        | WeightData::Q5_0(_) => Converted::Q8_0(quantize_rows(
            x,
            w.cols,
            &mut scratch.q8_0,
            quant::quantize_activations_q8_0,
            parallel,
        )),
        WeightData::Q4_1(_) | WeightData::Q5_1(_) => Converted::Q8_1(quantize_rows(
            x,
            w.cols,
            &mut scratch.q8_1,
            quant::quantize_activations_q8_1,
            parallel,
        )),
        WeightData::Q4K(_)
        | WeightData::Q4KInterleaved(_)
        | WeightData::Q5K(_)
        | WeightData::Q6K(_)
        | WeightData::Q6KInterleaved(_) => Converted::Q8K(quantize_rows(
            x,
            w.cols,
            &mut scratch.q8_k,
            quant::quantize_activations_q8_k,
            parallel,
        )),
    }
}

/// `quantize` of every row of `x` (`cols` each) into its blocks of `out`, rows in parallel when asked
/// and there are several.
fn quantize_rows<'a, B: quant::ActivationBlock>(
    x: &[f32],
    cols: usize,
    out: &'a mut Vec<B>,
    quantize: fn(&[f32], &mut [B]),
    parallel: bool,
) -> &'a [B] {
    let nb = cols / B::SIZE;
    out.resize(x.len() / B::SIZE, B::default());
    if !parallel || x.len() <= cols || nb == 0 {
        quantize(x, out);
        return out;
    }
    x.par_chunks(cols)
        .zip(out.par_chunks_mut(nb))
        .for_each(|(row, blocks)| quantize(row, blocks));
    out
}

/// Writes `out[i] = W[first_row + i] · x[t]` for `out.len()` consecutive rows. With `quads`, four rows per
/// call share one pass over the activation row: faster while the rows sit in cache (a few tokens) and,
/// for Q4_1 whose four-row dots prefetch the rows ahead and the repacked Q4_0 and Q4_K whose four-row
/// dots reduce the rows' totals together, when they stream from memory (one token); the other types'
/// four-row dots ran slower than one row per call there.
fn rows_dot(
    k: &KernelTable,
    w: &Weight,
    x: &Converted<'_>,
    first_row: usize,
    (t, tokens): (usize, usize),
    out: &mut [f32],
    quads: bool,
) {
    let group = if quads { 4 } else { usize::MAX };
    let (c, b) = (w.cols, w.units_per_row());
    macro_rules! blocks {
        ($v:expr, $a:expr, $one:ident, $four:ident $(, $path:expr)?) => {{
            let y = &$a[t * b..(t + 1) * b];
            let row = |r: usize| &$v[r * b..(r + 1) * b];
            let mut groups = out.chunks_exact_mut(group);
            let mut r = first_row;
            for quad in groups.by_ref() {
                quad.copy_from_slice(&k.$four(
                    [row(r), row(r + 1), row(r + 2), row(r + 3)],
                    y
                    $(, $path)?
                ));
                r += 4;
            }
            for o in groups.into_remainder() {
                *o = k.$one(row(r), y $(, $path)?);
                r += 1;
            }
        }};
    }
    let path = KPath::for_token(w.kind().file_type(), w.rows, tokens, t);
    match (&w.data, x) {
        (WeightData::F32(v), Converted::F32(a)) => {
            let y = &a[t * c..(t + 1) * c];
            for (i, o) in out.iter_mut().enumerate() {
                let r = first_row + i;
                *o = k.vec_dot_f32(&v[r * c..(r + 1) * c], y);
            }
        }
        (WeightData::F16(v), Converted::F16(a)) => {
            let y = &a[t * c..(t + 1) * c];
            let row = |r: usize| &v[r * c..(r + 1) * c];
            let mut groups = out.chunks_exact_mut(group);
            let mut r = first_row;
            for quad in groups.by_ref() {
                quad.copy_from_slice(
                    &k.vec_dot_f16_x4([row(r), row(r + 1), row(r + 2), row(r + 3)], y),
                );
                r += 4;
            }
            for o in groups.into_remainder() {
                *o = k.vec_dot_f16(row(r), y);
                r += 1;
            }
        }
        (WeightData::Bf16(v), Converted::Bf16(a)) => {
            let y = &a[t * c..(t + 1) * c];
            for (i, o) in out.iter_mut().enumerate() {
                let r = first_row + i;
                *o = k.vec_dot_bf16(&v[r * c..(r + 1) * c], y);
            }
        }
        (WeightData::Q8_0(v), Converted::Q8_0(a)) if !quads => {
            let y = &a[t * b..(t + 1) * b];
            k.gemv_q8_0_q8_0(&v[first_row * b..(first_row + out.len()) * b], y, out);
        }
        (WeightData::Q8_0(v), Converted::Q8_0(a)) => {
            blocks!(v, a, vec_dot_q8_0_q8_0, vec_dot_q8_0_q8_0_x4)
        }
        (WeightData::Q8_0Interleaved(v), Converted::Q8_0(a)) => {
            let y = &a[t * b..(t + 1) * b];
            groups_dot(v, b, first_row, out, |group| {
                k.vec_dot_q8_0_x16_q8_0(group, y)
            });
        }
        (WeightData::Q4_0(v), Converted::Q8_0(a)) if repacks(GgmlType::Q4_0, w.rows) => {
            blocks!(
                v,
                a,
                vec_dot_q4_0_q8_0_repacked,
                vec_dot_q4_0_q8_0_repacked_x4
            )
        }
        (WeightData::Q4_0(v), Converted::Q8_0(a)) => {
            blocks!(v, a, vec_dot_q4_0_q8_0, vec_dot_q4_0_q8_0_x4)
        }
        (WeightData::Q4_0Interleaved(v), Converted::Q8_0(a)) => {
            // Whole groups only: the callers cut interleaved matrices at multiples of sixteen rows.
            debug_assert!(first_row.is_multiple_of(INTERLEAVED_ROWS));
            let y = &a[t * b..(t + 1) * b];
            let first = first_row / INTERLEAVED_ROWS * b;
            let groups = out.len().div_ceil(INTERLEAVED_ROWS);
            k.gemv_q4_0_x16_q8_0(&v[first..first + groups * b], y, out);
        }
        (WeightData::Q4_1(v), Converted::Q8_1(a)) => {
            blocks!(v, a, vec_dot_q4_1_q8_1, vec_dot_q4_1_q8_1_x4)
        }
        (WeightData::Q5_0(v), Converted::Q8_0(a)) => {
            blocks!(v, a, vec_dot_q5_0_q8_0, vec_dot_q5_0_q8_0_x4)
        }
        (WeightData::Q5_1(v), Converted::Q8_1(a)) => {
            blocks!(v, a, vec_dot_q5_1_q8_1, vec_dot_q5_1_q8_1_x4)
        }
        (WeightData::Q4K(v), Converted::Q8K(a)) => {
            blocks!(v, a, vec_dot_q4_k_q8_k, vec_dot_q4_k_q8_k_x4, path)
        }
        (WeightData::Q4KInterleaved(v), Converted::Q8K(a)) => {
            let y = &a[t * b..(t + 1) * b];
            groups_dot(v, b, first_row, out, |group| {
                k.vec_dot_q4_k_x16_q8_k(group, y, path)
            });
        }
        (WeightData::Q5K(v), Converted::Q8K(a)) => {
            blocks!(v, a, vec_dot_q5_k_q8_k, vec_dot_q5_k_q8_k_x4, path)
        }
        (WeightData::Q6K(v), Converted::Q8K(a)) => {
            blocks!(v, a, vec_dot_q6_k_q8_k, vec_dot_q6_k_q8_k_x4, path)
        }
        (WeightData::Q6KInterleaved(v), Converted::Q8K(a)) => {
            debug_assert_eq!(path, KPath::VecDot, "llama.cpp never repacks Q6_K");
            let y = &a[t * b..(t + 1) * b];
            groups_dot(v, b, first_row, out, |group| {
                k.vec_dot_q6_k_x16_q8_k(group, y)
            });
        }
        _ => unreachable!("activations are converted for the weight's own type"),
    }
}

/// Writes `out[i]` for the rows from `first_row` of interleaved `groups` (of `nb` super-blocks),
/// a group's sixteen results from each call of `dot`.
fn groups_dot<B>(
    groups: &[B],
    nb: usize,
    first_row: usize,
    out: &mut [f32],
    dot: impl Fn(&[B]) -> [f32; INTERLEAVED_ROWS],
) {
    // Whole groups only: the callers cut interleaved matrices at multiples of sixteen rows.
    debug_assert!(first_row.is_multiple_of(INTERLEAVED_ROWS));
    for (g, results) in out.chunks_mut(INTERLEAVED_ROWS).enumerate() {
        let first = (first_row / INTERLEAVED_ROWS + g) * nb;
        results.copy_from_slice(&dot(&groups[first..first + nb])[..results.len()]);
    }
}

/// `out[t][r] = sum_k W[r][k] * x[t][k]` for `n_tokens` rows of `x` (`n_tokens x w.cols`, row-major);
/// `out` is `n_tokens x w.rows`. Runs on the current rayon pool with the process's kernel tier.
pub fn matmul(
    w: &Weight,
    x: &[f32],
    n_tokens: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    matmul_with(dispatch::table(), w, x, n_tokens, out, scratch);
}

/// [`matmul`] with the kernels of a given table (tests and benches compare tiers with it).
pub fn matmul_with(
    k: &KernelTable,
    w: &Weight,
    x: &[f32],
    n_tokens: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    matmul_split(k, Split::Pool, w, x, n_tokens, out, scratch);
}

/// [`matmul_with`] with its parallel loops run as `split` says (a forward pass's team, or the pool).
/// Same results either way: the split decides only which thread computes each output.
pub fn matmul_split(
    k: &KernelTable,
    split: Split<'_>,
    w: &Weight,
    x: &[f32],
    n_tokens: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    debug_assert_eq!(x.len(), n_tokens * w.cols);
    debug_assert_eq!(out.len(), n_tokens * w.rows);
    if n_tokens == 1 {
        let converted = convert(w, x, split, scratch);
        // The four-row dots of Q4_1 prefetch the rows ahead; those of the matrices llama.cpp repacks
        // reduce the four rows' block totals together.
        let quads = matches!(w.data, WeightData::Q4_1(_)) || repacks(w.kind().file_type(), w.rows);
        let rows_per_task = decode_rows_per_task(w, split.threads());
        debug_assert!(rows_per_task.is_multiple_of(row_step(w)));
        split.chunks_mut(out, rows_per_task, |task, chunk| {
            rows_dot(k, w, &converted, task * rows_per_task, (0, 1), chunk, quads);
        });
        return;
    }
    let mut transposed = std::mem::take(&mut scratch.transposed);
    {
        let converted = convert(w, x, split, scratch);
        if n_tokens < MIN_TILED_TOKENS
            || !tiled_matmul(k, split, w, &converted, n_tokens, out, &mut transposed)
        {
            rows_matmul(k, split, w, &converted, n_tokens, out, &mut transposed);
        }
    }
    scratch.transposed = transposed;
}

/// Weight bytes from which a one-token product is cut into [`LARGE_TASKS_PER_THREAD`] tasks per
/// thread: large enough that a claim is rare beside the rows it hands out.
const LARGE_PRODUCT_BYTES: usize = 8 << 20;
/// Tasks per thread of a one-token product over a large matrix: a thread that its neighbours slow
/// down takes fewer of them instead of holding the other threads at the end of every product (on a
/// 2-vCPU VM, the 8B Q4_K_M decode spent a tenth of its time waiting so with one share per thread).
const LARGE_TASKS_PER_THREAD: usize = 4;

/// Rows per task of a one-token product of `w` on `threads` threads.
fn decode_rows_per_task(w: &Weight, threads: usize) -> usize {
    if w.byte_size() < LARGE_PRODUCT_BYTES {
        return rows_per_thread(w, threads);
    }
    rows_per_task(w.rows, threads * LARGE_TASKS_PER_THREAD, row_step(w))
}

/// The rows a task's share of `w` comes in multiples of: sixteen for interleaved rows (a group),
/// four for the rest (the four-row dots).
fn row_step(w: &Weight) -> usize {
    rows_per_entry(w).max(4)
}

/// Rows per entry of `units_per_row` blocks in `w`'s values: sixteen for interleaved rows, else one.
fn rows_per_entry(w: &Weight) -> usize {
    match w.data {
        WeightData::Q4_0Interleaved(_)
        | WeightData::Q4KInterleaved(_)
        | WeightData::Q6KInterleaved(_)
        | WeightData::Q8_0Interleaved(_) => INTERLEAVED_ROWS,
        _ => 1,
    }
}

/// Rows per task of a product over `w`'s rows split over rows on `threads` threads: an even share
/// of [`TASKS_PER_THREAD`] tasks per thread, in whole steps of [`row_step`] rows.
fn rows_per_thread(w: &Weight, threads: usize) -> usize {
    rows_per_task(w.rows, threads * TASKS_PER_THREAD, row_step(w))
}

/// Rows per task of `rows` rows cut into `tasks` tasks, in whole steps of `step` rows.
fn rows_per_task(rows: usize, tasks: usize, step: usize) -> usize {
    rows.div_ceil(tasks.max(1)).next_multiple_of(step).max(step)
}

/// A few tokens, or several of a float type: each thread takes an even share of the weight rows, a
/// block of rows (kept in cache) at a time across every token, into a row-major `rows x tokens`
/// buffer that is transposed at the end.
fn rows_matmul(
    k: &KernelTable,
    split: Split<'_>,
    w: &Weight,
    converted: &Converted<'_>,
    n_tokens: usize,
    out: &mut [f32],
    transposed: &mut Vec<f32>,
) {
    transposed.resize(n_tokens * w.rows, 0.0);
    let rows_per_task = rows_per_thread(w, split.threads());
    split.chunks_mut(transposed, rows_per_task * n_tokens, |task, chunk| {
        for (block, chunk) in chunk.chunks_mut(ROWS_PER_BLOCK * n_tokens).enumerate() {
            let first_row = task * rows_per_task + block * ROWS_PER_BLOCK;
            let mut row_out = [0.0f32; ROWS_PER_BLOCK];
            let row_out = &mut row_out[..chunk.len() / n_tokens];
            for t in 0..n_tokens {
                rows_dot(k, w, converted, first_row, (t, n_tokens), row_out, true);
                for (i, &v) in row_out.iter().enumerate() {
                    chunk[i * n_tokens + t] = v;
                }
            }
        }
    });
    transpose_into(transposed, n_tokens, w.rows, out);
}

/// Several tokens of a quantized type, through the tier's tiled kernels; `false` (nothing done) for the
/// float types and empty matrices.
fn tiled_matmul(
    k: &KernelTable,
    split: Split<'_>,
    w: &Weight,
    converted: &Converted<'_>,
    n_tokens: usize,
    out: &mut [f32],
    transposed: &mut Vec<f32>,
) -> bool {
    let nb = w.units_per_row();
    if nb == 0 || w.rows == 0 {
        return false;
    }
    let product = TiledProduct {
        nb,
        rows: w.rows,
        rows_per_entry: rows_per_entry(w),
        n_tokens,
        split,
    };
    macro_rules! tiled {
        ($v:expr, $a:expr, $gemm:ident) => {
            product.run($v, $a, out, transposed, |w, x, out, layout| {
                k.$gemm(w, x, nb, out, layout)
            })
        };
    }
    let path = KPath::for_token(w.kind().file_type(), w.rows, n_tokens, 0);
    match (&w.data, converted) {
        (WeightData::Q8_0(v), Converted::Q8_0(a)) => tiled!(v, a, gemm_q8_0_q8_0),
        (WeightData::Q8_0Interleaved(v), Converted::Q8_0(a)) => tiled!(v, a, gemm_q8_0_x16_q8_0),
        (WeightData::Q4_0(v), Converted::Q8_0(a)) if repacks(GgmlType::Q4_0, w.rows) => {
            tiled!(v, a, gemm_q4_0_q8_0_repacked)
        }
        (WeightData::Q4_0(v), Converted::Q8_0(a)) => tiled!(v, a, gemm_q4_0_q8_0),
        (WeightData::Q4_0Interleaved(v), Converted::Q8_0(a)) => {
            tiled!(v, a, gemm_q4_0_x16_q8_0_repacked)
        }
        (WeightData::Q4_1(v), Converted::Q8_1(a)) => tiled!(v, a, gemm_q4_1_q8_1),
        (WeightData::Q5_0(v), Converted::Q8_0(a)) => tiled!(v, a, gemm_q5_0_q8_0),
        (WeightData::Q5_1(v), Converted::Q8_1(a)) => tiled!(v, a, gemm_q5_1_q8_1),
        (WeightData::Q4K(v), Converted::Q8K(a)) if path == KPath::RepackedGemm => {
            let gemm = |w: &[_], x: &[_], out: &mut [_], layout| {
                k.gemm_q4_k_q8_k_repacked(w, x, nb, out, layout)
            };
            product.run_repacked((k, w, converted), (v, a), (out, transposed), gemm);
        }
        (WeightData::Q4KInterleaved(v), Converted::Q8K(a)) => {
            let gemm = |w: &[_], x: &[_], out: &mut [_], layout| {
                k.gemm_q4_k_x16_q8_k_repacked(w, x, nb, out, layout)
            };
            product.run_repacked((k, w, converted), (v, a), (out, transposed), gemm);
        }
        // The other K-quant tiles take llama.cpp's tiled product's steps, for calls large enough
        // for it.
        (
            WeightData::Q4K(_)
            | WeightData::Q5K(_)
            | WeightData::Q6K(_)
            | WeightData::Q6KInterleaved(_),
            _,
        ) if path != KPath::Tiled => {
            return false;
        }
        (WeightData::Q4K(v), Converted::Q8K(a)) => tiled!(v, a, gemm_q4_k_q8_k),
        (WeightData::Q5K(v), Converted::Q8K(a)) => tiled!(v, a, gemm_q5_k_q8_k),
        (WeightData::Q6K(v), Converted::Q8K(a)) => tiled!(v, a, gemm_q6_k_q8_k),
        (WeightData::Q6KInterleaved(v), Converted::Q8K(a)) => tiled!(v, a, gemm_q6_k_x16_q8_k),
        _ => return false,
    }
    true
}

/// The shape of a quantized product of several tokens, and how its loops run.
#[derive(Clone, Copy)]
struct TiledProduct<'a> {
    /// Blocks per weight row and per token.
    nb: usize,
    rows: usize,
    /// Rows per entry of `nb` blocks of the weights ([`rows_per_entry`]).
    rows_per_entry: usize,
    n_tokens: usize,
    split: Split<'a>,
}

impl TiledProduct<'_> {
    /// `out = w x` with `gemm` (a tier's tiled kernel for `w`'s type, given weight rows, tokens, the
    /// output and its layout), split over blocks of tokens (each task writes its tokens' results in
    /// place) or, with few tokens, over blocks of rows (into `transposed`, then transposed into `out`).
    fn run<W: Sync, A: Sync>(
        &self,
        w: &[W],
        x: &[A],
        out: &mut [f32],
        transposed: &mut Vec<f32>,
        gemm: impl Fn(&[W], &[A], &mut [f32], OutLayout) + Sync,
    ) {
        let (nb, rows, n_tokens) = (self.nb, self.rows, self.n_tokens);
        if let Some(per_task) = tokens_per_task(n_tokens, rayon::current_num_threads()) {
            self.split.chunks_mut(out, per_task * rows, |task, chunk| {
                let first = task * per_task * nb;
                let tokens = &x[first..first + chunk.len() / rows * nb];
                gemm(w, tokens, chunk, OutLayout::token_major(rows));
            });
            return;
        }
        transposed.resize(n_tokens * rows, 0.0);
        let per_entry = self.rows_per_entry;
        let tasks = self.split.threads() * TASKS_PER_THREAD;
        let rows_per_task = rows_per_task(rows, tasks, per_entry.max(4));
        self.split
            .chunks_mut(transposed, rows_per_task * n_tokens, |task, chunk| {
                let first = task * rows_per_task / per_entry * nb;
                let task_rows = chunk.len() / n_tokens;
                let weights = &w[first..first + task_rows.div_ceil(per_entry) * nb];
                gemm(weights, x, chunk, OutLayout::row_major(n_tokens));
            });
        transpose_into(transposed, n_tokens, rows, out);
    }

    /// A product along llama.cpp's repacked Q4_K kernels: its GEMM ([`Self::run`] with `gemm`) takes
    /// the tokens in whole groups of four, its GEMV (the single-row dots) the rest.
    fn run_repacked<W: Sync>(
        &self,
        (k, w, converted): (&KernelTable, &Weight, &Converted<'_>),
        (v, a): (&[W], &[BlockQ8K]),
        (out, transposed): (&mut [f32], &mut Vec<f32>),
        gemm: impl Fn(&[W], &[BlockQ8K], &mut [f32], OutLayout) + Sync,
    ) {
        let (nb, n_tokens) = (self.nb, self.n_tokens);
        let gemm_tokens = n_tokens - n_tokens % 4;
        let grouped = TiledProduct {
            n_tokens: gemm_tokens,
            ..*self
        };
        let (grouped_out, rest) = out.split_at_mut(gemm_tokens * w.rows);
        grouped.run(v, &a[..gemm_tokens * nb], grouped_out, transposed, gemm);
        for (i, row) in rest.chunks_exact_mut(w.rows).enumerate() {
            rows_dot(k, w, converted, 0, (gemm_tokens + i, n_tokens), row, true);
        }
    }
}

/// Tokens per task when a tiled product of `n_tokens` splits over tokens on `threads` threads: as few
/// tasks as keep every thread busy with at most [`TOKENS_PER_TASK`] each; `None` when there are too
/// few tokens for that to pay (then it splits over rows).
fn tokens_per_task(n_tokens: usize, threads: usize) -> Option<usize> {
    let threads = threads.max(1);
    if n_tokens < MIN_TOKENS_PER_THREAD * threads {
        return None;
    }
    let tasks = n_tokens.div_ceil(TOKENS_PER_TASK).next_multiple_of(threads);
    Some(n_tokens.div_ceil(tasks))
}

/// `out[t * rows + r] = transposed[r * n_tokens + t]`.
fn transpose_into(transposed: &[f32], n_tokens: usize, rows: usize, out: &mut [f32]) {
    for (r, row) in transposed.chunks_exact(n_tokens).enumerate().take(rows) {
        for (t, &v) in row.iter().enumerate() {
            out[t * rows + r] = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::WeightType;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    /// Every runtime type's matmul, on every tier this CPU runs, in the decode (one token) and prefill
    /// (several tokens) paths, stays close to the f32 product of its own dequantized weights, and
    /// every tier agrees with the scalar reference.
    #[test]
    fn matmul_matches_dequantized_f32_product_on_every_tier() {
        // Three K-quant super-blocks (24 blocks of 32) a row: odd block counts for every type.
        let (rows, cols) = (70, 768);
        let values = random(rows * cols, 1);
        for n in [1, 3, 17, 40] {
            let x = random(n * cols, 2 + n as u64);
            for kind in WeightType::ALL {
                let w = Weight::from_f32(values.clone(), rows, cols, kind);
                let dense = w.to_f32();
                let scalar =
                    KernelTable::for_tier(cpu::KernelTier::Scalar).expect("scalar runs anywhere");
                let mut reference = vec![0f32; n * rows];
                matmul_with(
                    scalar,
                    &w,
                    &x,
                    n,
                    &mut reference,
                    &mut MatmulScratch::default(),
                );
                for tier in cpu::available_tiers() {
                    let table = KernelTable::for_tier(tier).expect("available tier");
                    let mut out = vec![0f32; n * rows];
                    matmul_with(table, &w, &x, n, &mut out, &mut MatmulScratch::default());
                    for t in 0..n {
                        for r in 0..rows {
                            let want: f32 = (0..cols)
                                .map(|k| dense[r * cols + k] * x[t * cols + k])
                                .sum();
                            let got = out[t * rows + r];
                            // Activation rounding (f16/bf16/int8) bounds the error; f32 only reorders sums.
                            let tol = match kind {
                                WeightType::F32 => 1e-4,
                                WeightType::F16 => 2e-2,
                                _ => 0.15,
                            };
                            assert!(
                                (want - got).abs() < tol,
                                "{kind} {tier:?} row {r} token {t}: {want} vs {got}"
                            );
                            let same = reference[t * rows + r];
                            assert!(
                                (same - got).abs() <= 1e-5 * cols as f32,
                                "{kind} {tier:?} row {r} token {t}: scalar {same} vs {got}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Every row of `w` against token `t` of a call of `n` tokens `x`, as single-row dots: decoding
    /// the token alone, except for the K-quants, whose dot follows llama.cpp's kernel for the token's
    /// place in the call ([`KPath::for_token`]).
    fn single_row_dots(
        table: &KernelTable,
        w: &Weight,
        x: &[f32],
        (t, n): (usize, usize),
    ) -> Vec<f32> {
        let token = &x[t * w.cols..(t + 1) * w.cols];
        let path = KPath::for_token(w.kind().file_type(), w.rows, n, t);
        let nb = w.units_per_row();
        let mut y = vec![BlockQ8K::default(); nb];
        quant::quantize_activations_q8_k(token, &mut y);
        let rows = 0..w.rows;
        match &w.data {
            WeightData::Q4K(v) => rows
                .map(|r| table.vec_dot_q4_k_q8_k(&v[r * nb..(r + 1) * nb], &y, path))
                .collect(),
            WeightData::Q5K(v) => rows
                .map(|r| table.vec_dot_q5_k_q8_k(&v[r * nb..(r + 1) * nb], &y, path))
                .collect(),
            WeightData::Q6K(v) => rows
                .map(|r| table.vec_dot_q6_k_q8_k(&v[r * nb..(r + 1) * nb], &y, path))
                .collect(),
            _ => {
                let mut alone = vec![0f32; w.rows];
                matmul_with(
                    table,
                    w,
                    token,
                    1,
                    &mut alone,
                    &mut MatmulScratch::default(),
                );
                alone
            }
        }
    }

    /// A quantized matmul of several tokens, split over rows (few tokens) or over tokens (many), gives
    /// every (row, token) the bits of the single-row dot that decoding that token alone would run
    /// (a K-quant's along llama.cpp's kernel for its place in the call).
    #[test]
    fn quantized_matmul_of_many_tokens_equals_single_row_dots_bit_for_bit() {
        // 72 rows: llama.cpp repacks a Q4_K matrix of whole eights of rows; 70: it does not.
        for rows in [70, 72] {
            matmul_of_many_tokens_equals_single_row_dots(rows);
        }
    }

    fn matmul_of_many_tokens_equals_single_row_dots(rows: usize) {
        let cols = 768;
        let values = random(rows * cols, 3);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        for n in [2, 5, 17, 40, 133] {
            assert_eq!(
                tokens_per_task(n, 2).is_some(),
                n >= 2 * MIN_TOKENS_PER_THREAD
            );
            let x = random(n * cols, 4 + n as u64);
            for kind in WeightType::ALL.into_iter().filter(|k| k.is_quantized()) {
                let w = Weight::from_f32(values.clone(), rows, cols, kind);
                for tier in cpu::available_tiers() {
                    let table = KernelTable::for_tier(tier).expect("available tier");
                    let mut out = vec![0f32; n * rows];
                    pool.install(|| {
                        matmul_with(table, &w, &x, n, &mut out, &mut MatmulScratch::default())
                    });
                    for t in 0..n {
                        let alone = single_row_dots(table, &w, &x, (t, n));
                        for r in 0..rows {
                            assert_eq!(
                                out[t * rows + r].to_bits(),
                                alone[r].to_bits(),
                                "{kind} {tier:?} {n} tokens: row {r} token {t}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Q4_0, Q4_K, Q6_K and Q8_0 rows held interleaved sixteen at a time give every product, on every tier, in
    /// every path (decode, a few tokens, the tiled prompt product split over rows or tokens, on a
    /// pool or a team), the bits of the same rows in the file's layout; and the embedding lookup
    /// its values.
    #[test]
    fn interleaved_q4_k_rows_give_the_bits_of_the_file_layout() {
        interleaved_rows_give_the_bits_of_the_file_layout(WeightType::Q4K);
    }

    #[test]
    fn interleaved_q6_k_rows_give_the_bits_of_the_file_layout() {
        interleaved_rows_give_the_bits_of_the_file_layout(WeightType::Q6K);
    }

    #[test]
    fn interleaved_q4_0_rows_give_the_bits_of_the_file_layout() {
        interleaved_rows_give_the_bits_of_the_file_layout(WeightType::Q4_0);
    }

    #[test]
    fn interleaved_q8_0_rows_give_the_bits_of_the_file_layout() {
        interleaved_rows_give_the_bits_of_the_file_layout(WeightType::Q8_0);
    }

    fn interleaved_rows_give_the_bits_of_the_file_layout(kind: WeightType) {
        // 80 rows: five groups, which two threads cannot share evenly.
        let (rows, cols) = (80, 768);
        let file = Weight::from_f32(random(rows * cols, 7), rows, cols, kind);
        let interleaved = file.clone().interleaved();
        assert!(matches!(
            interleaved.data,
            WeightData::Q4_0Interleaved(_)
                | WeightData::Q4KInterleaved(_)
                | WeightData::Q6KInterleaved(_)
                | WeightData::Q8_0Interleaved(_)
        ));
        assert_eq!(interleaved.kind(), kind);
        assert_eq!(interleaved.byte_size(), file.byte_size());
        assert_eq!(interleaved.to_f32(), file.to_f32());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        for n in [1, 2, 4, 5, 7, 8, 13, 40, 133] {
            let x = random(n * cols, 8 + n as u64);
            for tier in cpu::available_tiers() {
                let table = KernelTable::for_tier(tier).expect("available tier");
                let run = |w: &Weight, split: Split<'_>| {
                    let mut out = vec![0f32; n * rows];
                    let mut scratch = MatmulScratch::default();
                    matmul_split(table, split, w, &x, n, &mut out, &mut scratch);
                    out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                };
                let (want, pooled, teamed) = pool.install(|| {
                    let teamed =
                        crate::team::with_team(|team| run(&interleaved, Split::Team(team)));
                    (
                        run(&file, Split::Pool),
                        run(&interleaved, Split::Pool),
                        teamed,
                    )
                });
                assert_eq!(pooled, want, "{kind} {tier:?} {n} tokens on the pool");
                assert_eq!(teamed, want, "{kind} {tier:?} {n} tokens on a team");
            }
        }
    }

    /// A product whose loops run on a team of the pool's threads, or on the calling thread alone, gives
    /// the bits of the same product run as fork-joins on the pool, for every weight type and tier.
    #[test]
    fn a_team_computes_the_bits_of_the_pool() {
        let (rows, cols) = (200, 768);
        let values = random(rows * cols, 5);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        for n in [1, 4, 16] {
            let x = random(n * cols, 6 + n as u64);
            for kind in WeightType::ALL {
                let w = Weight::from_f32(values.clone(), rows, cols, kind);
                for tier in cpu::available_tiers() {
                    let table = KernelTable::for_tier(tier).expect("available tier");
                    let run = |split: Split<'_>| {
                        let mut out = vec![0f32; n * rows];
                        let mut scratch = MatmulScratch::default();
                        matmul_split(table, split, &w, &x, n, &mut out, &mut scratch);
                        out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                    };
                    let (pooled, teamed, here) = pool.install(|| {
                        let teamed = crate::team::with_team(|team| run(Split::Team(team)));
                        (run(Split::Pool), teamed, run(Split::Here))
                    });
                    assert_eq!(pooled, teamed, "{kind} {tier:?} {n} tokens on a team");
                    assert_eq!(pooled, here, "{kind} {tier:?} {n} tokens on one thread");
                }
            }
        }
    }

    #[test]
    fn one_token_products_over_large_matrices_take_several_tasks_per_thread() {
        let large = Weight::from_f32(vec![0.5; 2048 * 4096], 2048, 4096, WeightType::Q8_0);
        assert!(large.byte_size() >= LARGE_PRODUCT_BYTES);
        assert_eq!(
            decode_rows_per_task(&large, 2),
            2048 / (2 * LARGE_TASKS_PER_THREAD)
        );
        let small = Weight::from_f32(vec![0.5; 576 * 1536], 576, 1536, WeightType::Q8_0);
        assert_eq!(decode_rows_per_task(&small, 2), 288);
    }

    #[test]
    fn rows_split_into_one_share_per_thread_in_whole_steps() {
        let share = |rows, threads| rows_per_task(rows, threads * TASKS_PER_THREAD, 4);
        assert_eq!(share(576, 2), 288);
        assert_eq!(share(960, 2), 480);
        assert_eq!(share(70, 2), 36);
        assert_eq!(share(576, 1), 576);
        assert_eq!(share(3, 2), 4);
        assert_eq!(share(0, 0), 4);
        for (rows, threads) in [(49152usize, 2), (1536, 3), (7, 4), (100, 7)] {
            let per_task = share(rows, threads);
            assert_eq!(per_task % 4, 0);
            assert!(rows.div_ceil(per_task) <= threads * TASKS_PER_THREAD);
        }
        let q4_k = Weight::from_f32(vec![0.5; 48 * 256], 48, 256, WeightType::Q4K);
        assert_eq!(rows_per_thread(&q4_k, 2), 24);
        assert_eq!(rows_per_thread(&q4_k.interleaved(), 2), 32);
    }

    #[test]
    fn tasks_split_tokens_evenly_over_threads() {
        assert_eq!(tokens_per_task(31, 2), None);
        assert_eq!(tokens_per_task(40, 2), Some(20));
        assert_eq!(tokens_per_task(512, 2), Some(128));
        assert_eq!(tokens_per_task(130, 2), Some(65));
        assert_eq!(tokens_per_task(16, 1), Some(16));
    }
}
