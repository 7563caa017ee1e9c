//! One forward pass: its tokens and their sequences, the activations it reuses from pass to pass,
//! and the walk from embeddings through the layers to the logits.

use super::{
    Llama,
    ops::{ELEMENTWISE_TOKENS, TEAM_TOKENS, matmul, rms_norm},
};
use crate::{
    kernels::{
        MatmulScratch,
        attention::{CachedHead, GroupQueries},
    },
    model::{
        config::{LlamaConfig, RopeStyle},
        kv::{KvStorage, SeqLayout},
    },
    team::{self, Split},
};

/// Where a token of a pass belongs: its sequence (index into the pass's layouts) and position.
#[derive(Debug, Clone, Copy)]
pub(super) struct TokenAt {
    pub(super) seq: usize,
    pub(super) pos: usize,
}

/// The tokens of one forward pass, from one or many sequences.
pub(super) struct Pass<'a> {
    pub(super) tokens: &'a [u32],
    pub(super) at: &'a [TokenAt],
    pub(super) layouts: &'a [SeqLayout<'a>],
    /// Per sequence, the tokens its forward call feeds (all passes of it together): from
    /// [`TILED_MIN_TOKENS`](crate::kernels::attention::TILED_MIN_TOKENS) on, its attention takes
    /// llama.cpp's tiled form.
    pub(super) call_tokens: &'a [usize],
    pub(super) logit_rows: &'a [usize],
}

/// What a forward pass reuses from the one before: activations and the pass's bookkeeping, grown to
/// the largest pass seen, so that a decode step after the first allocates nothing.
#[derive(Default)]
pub(super) struct Workspace {
    pub(super) buffers: Buffers,
    pub(super) at: Vec<TokenAt>,
    pub(super) logit_rows: Vec<usize>,
    /// One pass's logits, when a call runs as several passes.
    pub(super) logits: Vec<f32>,
}

/// Query tokens per attention task: enough rows to share each widened block of keys, few enough to
/// spread a prompt over the threads.
pub(super) const QUERY_TOKENS: usize = 16;

/// Consecutive tokens of one sequence that attend together (tokens `first..first + tokens` of a pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct QueryBlock {
    pub(super) first: usize,
    pub(super) tokens: usize,
}

/// Cuts a pass's tokens into [`QueryBlock`]s of at most [`QUERY_TOKENS`], each within one sequence at
/// consecutive positions.
pub(super) fn query_blocks(at: &[TokenAt], out: &mut Vec<QueryBlock>) {
    out.clear();
    let mut first = 0;
    while first < at.len() {
        let mut tokens = 1;
        while first + tokens < at.len()
            && tokens < QUERY_TOKENS
            && at[first + tokens].seq == at[first].seq
            && at[first + tokens].pos == at[first].pos + tokens
        {
            tokens += 1;
        }
        out.push(QueryBlock { first, tokens });
        first += tokens;
    }
}

/// A tier's attention kernel for one cache type.
pub(super) type AttentionKernel<'a, T> =
    dyn Fn(&GroupQueries<'_>, &CachedHead<'_, T>, &mut [f32]) + Sync + 'a;

/// One layer's attention inputs: the queries of a pass and the cache they attend to.
pub(super) struct AttentionInputs<'a, T> {
    pub(super) pass: &'a Pass<'a>,
    pub(super) layer: usize,
    pub(super) kv_dim: usize,
    pub(super) q: &'a [f32],
    pub(super) keys: &'a [T],
    pub(super) values: &'a [T],
    pub(super) kernel: &'a AttentionKernel<'a, T>,
    pub(super) window: Option<usize>,
}

/// Activations of a forward pass, sized for its tokens by [`Buffers::prepare`].
#[derive(Default)]
pub(super) struct Buffers {
    pub(super) x: Vec<f32>,
    pub(super) xb: Vec<f32>,
    pub(super) q: Vec<f32>,
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
    pub(super) att: Vec<f32>,
    pub(super) proj: Vec<f32>,
    pub(super) gate: Vec<f32>,
    pub(super) up: Vec<f32>,
    pub(super) combined: Vec<f32>,
    pub(super) scratch: MatmulScratch,
    pub(super) blocks: Vec<QueryBlock>,
    /// Per RoPE table, per token, per pair: the cosine and sine of its rotation (shared by every
    /// layer of the table and every head).
    pub(super) rotations: Vec<Vec<[f32; 2]>>,
    /// Where each query block's attention output starts in `att`, and where the last one ends.
    pub(super) block_bounds: Vec<usize>,
}

impl Buffers {
    /// Sizes every buffer for `n` tokens; capacity only grows.
    pub(super) fn prepare(&mut self, config: &LlamaConfig, n: usize) {
        let (d, q, kv) = (config.dim, config.q_dim(), config.kv_dim());
        for (buffer, width) in [
            (&mut self.x, d),
            (&mut self.xb, d),
            (&mut self.q, q),
            (&mut self.k, kv),
            (&mut self.v, kv),
            (&mut self.att, q),
            (&mut self.proj, d),
        ] {
            buffer.resize(n * width, 0.0);
        }
    }
}

impl Llama {
    /// The forward pass over every token of `pass`; writes the logits of its `logit_rows` to `out`.
    /// A small pass (decode steps) runs its loops on a [`team::Team`] of the pool's threads, a larger
    /// one as fork-joins on the pool; the results are the same.
    pub(super) fn run_pass(
        &self,
        pass: &Pass<'_>,
        storage: &mut KvStorage,
        kv_dim: usize,
        b: &mut Buffers,
        out: &mut Vec<f32>,
    ) {
        if pass.tokens.len() <= TEAM_TOKENS && self.pool.current_num_threads() > 1 {
            team::with_team(|team| {
                self.run_layers(Split::Team(team), pass, storage, kv_dim, b, out);
            });
        } else {
            self.run_layers(Split::Pool, pass, storage, kv_dim, b, out);
        }
    }

    pub(super) fn run_layers(
        &self,
        split: Split<'_>,
        pass: &Pass<'_>,
        storage: &mut KvStorage,
        kv_dim: usize,
        b: &mut Buffers,
        out: &mut Vec<f32>,
    ) {
        let c = &self.config;
        let n = pass.tokens.len();
        b.prepare(c, n);
        self.rotations(pass, &mut b.rotations);
        for (t, &token) in pass.tokens.iter().enumerate() {
            let row = &mut b.x[t * c.dim..(t + 1) * c.dim];
            self.embedding.row_to_f32(token as usize, row);
            if let Some(scale) = c.embedding_scale {
                row.iter_mut().for_each(|v| *v *= scale);
            }
        }
        for (index, layer) in self.layers.iter().enumerate() {
            self.attention_block(split, index, b, pass, storage, kv_dim);
            self.ffn_block(split, layer, b, n);
        }
        self.head(split, b, pass.logit_rows, out);
    }

    pub(super) fn head(
        &self,
        split: Split<'_>,
        b: &mut Buffers,
        logit_rows: &[usize],
        out: &mut Vec<f32>,
    ) {
        let c = &self.config;
        let d = c.dim;
        let rows = logit_rows.len();
        out.clear();
        if rows == 0 {
            return;
        }
        for (i, &t) in logit_rows.iter().enumerate() {
            b.proj[i * d..(i + 1) * d].copy_from_slice(&b.x[t * d..(t + 1) * d]);
        }
        let xb = &mut b.xb[..rows * d];
        rms_norm(split, &b.proj[..rows * d], &self.output_norm, c.rms_eps, xb);
        let head = self.output.as_ref().unwrap_or(&self.embedding);
        out.resize(rows * c.vocab_size, 0.0);
        matmul(split, head, xb, rows, out, &mut b.scratch);
        if let Some(cap) = c.final_logit_softcap {
            for logit in out.iter_mut() {
                *logit = (*logit * (1.0 / cap)).tanh() * cap;
            }
        }
    }

    /// Per RoPE table, each pair's cosine and sine for every token of `pass`, into `out`.
    pub(super) fn rotations(&self, pass: &Pass<'_>, out: &mut Vec<Vec<[f32; 2]>>) {
        out.resize_with(self.ropes.len(), Vec::new);
        for (rotations, table) in out.iter_mut().zip(&self.ropes) {
            rotations.clear();
            for at in pass.at {
                table.push_rotations(at.pos, rotations);
            }
        }
    }

    /// RoPE of every row of `x` (one token's q or k, `width` wide) by its token's `rotations`.
    pub(super) fn rope_rows(
        &self,
        split: Split<'_>,
        x: &mut [f32],
        width: usize,
        rotations: &[[f32; 2]],
    ) {
        let half = self.config.head_dim / 2;
        split.chunks_mut(x, width * ELEMENTWISE_TOKENS, |task, rows| {
            for (i, row) in rows.chunks_exact_mut(width).enumerate() {
                let t = task * ELEMENTWISE_TOKENS + i;
                self.rope(row, &rotations[t * half..(t + 1) * half]);
            }
        });
    }

    /// Rotates every head of `x` (one token's q or k) by its position's `rotations`.
    pub(super) fn rope(&self, x: &mut [f32], rotations: &[[f32; 2]]) {
        let hd = self.config.head_dim;
        let half = hd / 2;
        for head in x.chunks_exact_mut(hd) {
            for (i, &[cos, sin]) in rotations.iter().enumerate() {
                let (a, b) = match self.config.rope_style {
                    RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                    RopeStyle::Neox => (i, i + half),
                };
                // ggml's rope, as its x86 build contracts it: the first product fused.
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0.mul_add(cos, -(x1 * sin));
                head[b] = x0.mul_add(sin, x1 * cos);
            }
        }
    }
}
