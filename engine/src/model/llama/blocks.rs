//! The two halves of a transformer block: grouped-query attention over the cache, and the gated
//! feed-forward.

use super::{
    Llama,
    ops::{
        FFN_TOKENS, add_bias, add_residual, gated_activation, gated_activation_rows, matmul,
        rms_norm, rms_norm_heads,
    },
    pass::{AttentionInputs, Buffers, Pass, QueryBlock, query_blocks},
    pass_ranges,
    weights::Layer,
};
use crate::{
    kernels::{
        self,
        attention::{CachedHead, GroupQueries, TILED_MIN_TOKENS},
    },
    model::kv::KvStorage,
    team::Split,
};

impl Llama {
    /// Attention of layer `index` over the pass's tokens, storing their keys and values.
    pub(super) fn attention_block(
        &self,
        split: Split<'_>,
        index: usize,
        b: &mut Buffers,
        pass: &Pass<'_>,
        storage: &mut KvStorage,
        kv_dim: usize,
    ) {
        let layer = &self.layers[index];
        let c = &self.config;
        let n = pass.tokens.len();
        rms_norm(split, &b.x, &layer.attn_norm, c.rms_eps, &mut b.xb);
        layer.qkv.matmul(
            split,
            &b.xb,
            n,
            &mut [&mut b.q, &mut b.k, &mut b.v],
            &mut b.combined,
            &mut b.scratch,
        );
        add_bias(&mut b.q, layer.bq.as_deref());
        add_bias(&mut b.k, layer.bk.as_deref());
        add_bias(&mut b.v, layer.bv.as_deref());
        let q_dim = c.q_dim();
        if let Some(weight) = &layer.q_norm {
            rms_norm_heads(split, &mut b.q, weight, c.rms_eps);
        }
        if let Some(weight) = &layer.k_norm {
            rms_norm_heads(split, &mut b.k, weight, c.rms_eps);
        }
        let rotations = &b.rotations[layer.rope];
        for (x, width) in [(&mut b.q, q_dim), (&mut b.k, kv_dim)] {
            self.rope_rows(split, x, width, rotations);
        }
        if let Some(scale) = c.query_scale {
            b.q.iter_mut().for_each(|v| *v *= scale);
        }
        for (t, at) in pass.at.iter().enumerate() {
            let row = t * kv_dim..(t + 1) * kv_dim;
            let offset = pass.layouts[at.seq].offset(index, at.pos, kv_dim);
            storage.store(offset, &b.k[row.clone()], &b.v[row]);
        }
        query_blocks(pass.at, &mut b.blocks);
        b.block_bounds.clear();
        b.block_bounds
            .extend(b.blocks.iter().map(|block| block.first * q_dim));
        b.block_bounds.push(n * q_dim);
        let k = kernels::dispatch::table();
        let blocks = (&b.blocks[..], &b.block_bounds[..]);
        match storage {
            KvStorage::F32 { k: keys, v: values } => self.attend_blocks(
                split,
                &AttentionInputs {
                    pass,
                    layer: index,
                    kv_dim,
                    q: &b.q,
                    keys,
                    values,
                    kernel: &|q, kv, out| k.attend_f32(q, kv, out),
                    window: layer.window,
                },
                blocks,
                &mut b.att,
            ),
            KvStorage::F16 { k: keys, v: values } => self.attend_blocks(
                split,
                &AttentionInputs {
                    pass,
                    layer: index,
                    kv_dim,
                    q: &b.q,
                    keys,
                    values,
                    kernel: &|q, kv, out| k.attend_f16(q, kv, out),
                    window: layer.window,
                },
                blocks,
                &mut b.att,
            ),
        }
        matmul(split, &layer.wo, &b.att, n, &mut b.proj, &mut b.scratch);
        self.add_block_output(split, layer.post_attn_norm.as_deref(), b);
    }

    /// `x += out` of a block whose output is in `proj`, RMS-normed first when it has a post-norm.
    pub(super) fn add_block_output(
        &self,
        split: Split<'_>,
        post_norm: Option<&[f32]>,
        b: &mut Buffers,
    ) {
        let c = &self.config;
        match post_norm {
            Some(weight) => {
                rms_norm(split, &b.proj, weight, c.rms_eps, &mut b.xb);
                add_residual(split, &mut b.x, &b.xb, c.dim);
            }
            None => add_residual(split, &mut b.x, &b.proj, c.dim),
        }
    }

    /// Causal grouped-query attention of the tokens of `blocks` (their query blocks and where each
    /// one's output starts in `out`, then where the last ends), the blocks split over the threads.
    pub(super) fn attend_blocks<T: Sync>(
        &self,
        split: Split<'_>,
        inputs: &AttentionInputs<'_, T>,
        (blocks, bounds): (&[QueryBlock], &[usize]),
        out: &mut [f32],
    ) {
        if let [block] = blocks {
            self.attend_block(split, inputs, *block, out);
            return;
        }
        // A pool's task may split further; a team's tasks must not start loops of their own.
        let inner = match split {
            Split::Pool => Split::Pool,
            Split::Team(_) | Split::Here => Split::Here,
        };
        split
            .parts_mut(out, bounds, |i, part| {
                self.attend_block(inner, inputs, blocks[i], part)
            })
            .unwrap_or_else(|bad| {
                unreachable!("query blocks cover the pass in order, not at {bad:?}")
            });
    }

    /// One query block, one key/value head at a time (a lone token splits over the heads instead).
    pub(super) fn attend_block<T: Sync>(
        &self,
        split: Split<'_>,
        inputs: &AttentionInputs<'_, T>,
        block: QueryBlock,
        out: &mut [f32],
    ) {
        let c = &self.config;
        let (hd, group, q_dim) = (c.head_dim, c.n_heads / c.n_kv_heads, c.q_dim());
        let start = inputs.pass.at[block.first];
        let layout = &inputs.pass.layouts[start.seq];
        // Queries scaled beforehand leave the scores unscaled, as llama.cpp runs Gemma.
        let scale = match c.query_scale {
            Some(_) => 1.0,
            None => 1.0 / (hd as f32).sqrt(),
        };
        let group_attends = |g: usize, out: &mut [f32]| {
            let offset = |j: usize| layout.offset(inputs.layer, j, inputs.kv_dim) + g * hd;
            let queries = GroupQueries {
                q: &inputs.q[block.first * q_dim + g * group * hd..],
                stride: q_dim,
                tokens: block.tokens,
                heads: group,
                head_dim: hd,
                first_pos: start.pos,
                scale,
                window: inputs.window,
                tiled: inputs.pass.call_tokens[start.seq] >= TILED_MIN_TOKENS,
            };
            let head = CachedHead {
                keys: inputs.keys,
                values: inputs.values,
                offset: &offset,
            };
            (inputs.kernel)(&queries, &head, out);
        };
        if block.tokens == 1 {
            split.chunks_mut(
                &mut out[..c.n_kv_heads * group * hd],
                group * hd,
                group_attends,
            );
        } else {
            for g in 0..c.n_kv_heads {
                group_attends(g, &mut out[g * group * hd..]);
            }
        }
    }

    /// The feed-forward block over the pass's tokens, [`FFN_TOKENS`] at a time: its widest
    /// activations (gate and up) are then held for that many tokens, not for a whole pass. The
    /// tokens are cut as [`pass_ranges`] cuts a call, so each takes the kernel path it would take in
    /// one product.
    pub(super) fn ffn_block(&self, split: Split<'_>, layer: &Layer, b: &mut Buffers, n: usize) {
        let c = &self.config;
        let (d, f) = (c.dim, c.ffn_dim);
        rms_norm(split, &b.x, &layer.ffn_norm, c.rms_eps, &mut b.xb);
        for range in pass_ranges(n, FFN_TOKENS) {
            let m = range.len();
            let x = &b.xb[range.start * d..range.end * d];
            let hidden = match &layer.gate_up.fused {
                // Each output row is [gate | up]; the gated rows are packed to its front.
                Some(fused) => {
                    b.combined.resize(m * 2 * f, 0.0);
                    matmul(split, fused, x, m, &mut b.combined, &mut b.scratch);
                    gated_activation_rows(split, c.activation, f, &mut b.combined);
                    &b.combined[..m * f]
                }
                None => {
                    b.gate.resize(m * f, 0.0);
                    b.up.resize(m * f, 0.0);
                    let (gate, up) = (&mut b.gate[..m * f], &mut b.up[..m * f]);
                    layer.gate_up.matmul(
                        split,
                        x,
                        m,
                        &mut [&mut *gate, &mut *up],
                        &mut b.combined,
                        &mut b.scratch,
                    );
                    gated_activation(split, c.activation, f, gate, up);
                    &b.gate[..m * f]
                }
            };
            let proj = &mut b.proj[range.start * d..range.end * d];
            matmul(split, &layer.w_down, hidden, m, proj, &mut b.scratch);
        }
        self.add_block_output(split, layer.post_ffn_norm.as_deref(), b);
    }
}
