//! The Llama-family forward pass over a key/value cache, batched over the tokens of one or many
//! sequences: RMSNorm, RoPE, grouped-query attention, a gated feed-forward, tied or untied head, and
//! what Qwen3 and Gemma 3 add as llama.cpp builds them (per-head Q/K norms, post-norms, GeGLU, scaled
//! embeddings and queries, sliding-window layers with their own RoPE base, a soft-capped head).

use std::sync::{Mutex, OnceLock, PoisonError};

use half::f16;

use crate::{
    error::{Error, Result},
    format::{RawTensor, TensorSource},
    kernels::{
        self, MatmulScratch,
        attention::{CachedHead, GroupQueries},
    },
    model::{
        config::{Activation, LlamaConfig, RopeStyle},
        kv::{KvCache, KvStorage, KvType, PagedKv, SeqLayout},
    },
    placement::{self, Applied, Placement, Topology},
    quant::{self, GgmlType},
    team::{self, Split},
    weights::{Weight, WeightBuilder, WeightMix, WeightType},
};

/// Bytes of a tensor copied out of a mapped file before they are handed back: the most the loader
/// holds twice at a time.
const LOAD_PIECE_BYTES: usize = 8 << 20;

/// How a model is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadOptions {
    /// The runtime type of the weight matrices; `None` keeps each file type the engine can run.
    pub weights: Option<WeightType>,
    /// Worker threads of the engine's pool (0 = one per available core).
    pub threads: usize,
    /// Where the pool's workers run and where memory is taken from.
    pub placement: Placement,
}

/// Which positions of a forward pass need logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's (generation).
    Last,
    /// Every token's (perplexity, scoring).
    All,
}

/// Matrices that read the same input (Q, K, V; gate, up), stacked into one so that the input is
/// converted once and the pool runs one parallel pass; kept apart when their types differ.
struct Stacked {
    fused: Option<Weight>,
    parts: Vec<Weight>,
    widths: Vec<usize>,
}

impl Stacked {
    /// One matrix holding parts of `widths` rows, in order.
    fn fused(fused: Weight, widths: Vec<usize>) -> Self {
        Self {
            fused: Some(fused),
            parts: Vec::new(),
            widths,
        }
    }

    /// Matrices of different types, multiplied one by one.
    fn apart(parts: Vec<Weight>) -> Self {
        Self {
            fused: None,
            widths: parts.iter().map(|p| p.rows).collect(),
            parts,
        }
    }

    /// The matrices, fused or apart.
    fn matrices(&self) -> impl Iterator<Item = &Weight> {
        self.fused.iter().chain(&self.parts)
    }

    fn byte_size(&self) -> usize {
        self.fused
            .iter()
            .chain(&self.parts)
            .map(Weight::byte_size)
            .sum()
    }

    /// `outs[i] = parts[i] x` for `n` input rows; `combined` is scratch.
    fn matmul(
        &self,
        split: Split<'_>,
        x: &[f32],
        n: usize,
        outs: &mut [&mut [f32]],
        combined: &mut Vec<f32>,
        scratch: &mut MatmulScratch,
    ) {
        let Some(fused) = &self.fused else {
            for (w, out) in self.parts.iter().zip(outs.iter_mut()) {
                matmul(split, w, x, n, out, scratch);
            }
            return;
        };
        combined.resize(n * fused.rows, 0.0);
        matmul(split, fused, x, n, combined, scratch);
        for (t, row) in combined.chunks_exact(fused.rows).enumerate() {
            let mut at = 0;
            for (out, &width) in outs.iter_mut().zip(&self.widths) {
                out[t * width..(t + 1) * width].copy_from_slice(&row[at..at + width]);
                at += width;
            }
        }
    }
}

struct Layer {
    attn_norm: Vec<f32>,
    qkv: Stacked,
    wo: Weight,
    bq: Option<Vec<f32>>,
    bk: Option<Vec<f32>>,
    bv: Option<Vec<f32>>,
    /// Per-head RMSNorm weights of queries and keys (`head_dim` each).
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    /// RMSNorm of the attention output before its residual add.
    post_attn_norm: Option<Vec<f32>>,
    ffn_norm: Vec<f32>,
    gate_up: Stacked,
    w_down: Weight,
    /// RMSNorm of the feed-forward output before its residual add.
    post_ffn_norm: Option<Vec<f32>>,
    /// Positions a query sees when this is a sliding-window layer.
    window: Option<usize>,
    /// Which of the model's RoPE tables this layer rotates by.
    rope: usize,
}

impl Layer {
    /// The layer's matrices.
    fn matrices(&self) -> impl Iterator<Item = &Weight> {
        self.qkv
            .matrices()
            .chain(self.gate_up.matrices())
            .chain([&self.wo, &self.w_down])
    }

    fn norm_bytes(&self) -> usize {
        let optional = [
            &self.q_norm,
            &self.k_norm,
            &self.post_attn_norm,
            &self.post_ffn_norm,
        ];
        let values = self.attn_norm.len()
            + self.ffn_norm.len()
            + optional
                .iter()
                .filter_map(|v| v.as_ref())
                .map(Vec::len)
                .sum::<usize>();
        4 * values
    }
}

/// Which RoPE table a global layer and a sliding-window layer use.
const GLOBAL_ROPE: usize = 0;
const SLIDING_ROPE: usize = 1;

/// A loaded Llama-family model with its own thread pool.
pub struct Llama {
    config: LlamaConfig,
    embedding: Weight,
    output: Option<Weight>,
    output_norm: Vec<f32>,
    layers: Vec<Layer>,
    /// Per RoPE table (global layers, then sliding-window layers when there are any): the angle per
    /// position of each pair.
    ropes: Vec<Vec<f64>>,
    pool: rayon::ThreadPool,
    placement: Applied,
    workspace: Mutex<Workspace>,
}

/// One sequence's part of [`Llama::forward_batch`].
#[derive(Debug, Clone, Copy)]
pub struct BatchSeq<'a> {
    /// Tokens to run, at positions `start..start + tokens.len()`.
    pub tokens: &'a [u32],
    /// Positions already in the sequence's blocks.
    pub start: usize,
    /// The sequence's block table: position `p` lives in `blocks[p / block_size]`.
    pub blocks: &'a [u32],
    /// Whether to return the logits of the last token.
    pub logits: bool,
}

/// Where a token of a pass belongs: its sequence (index into the pass's layouts) and position.
#[derive(Debug, Clone, Copy)]
struct TokenAt {
    seq: usize,
    pos: usize,
}

/// The tokens of one forward pass, from one or many sequences.
struct Pass<'a> {
    tokens: &'a [u32],
    at: &'a [TokenAt],
    layouts: &'a [SeqLayout<'a>],
    logit_rows: &'a [usize],
}

/// What a forward pass reuses from the one before: activations and the pass's bookkeeping, grown to
/// the largest pass seen, so that a decode step after the first allocates nothing.
#[derive(Default)]
struct Workspace {
    buffers: Buffers,
    at: Vec<TokenAt>,
    logit_rows: Vec<usize>,
}

/// Query tokens per attention task: enough rows to share each widened block of keys, few enough to
/// spread a prompt over the threads.
const QUERY_TOKENS: usize = 16;

/// Consecutive tokens of one sequence that attend together (tokens `first..first + tokens` of a pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct QueryBlock {
    first: usize,
    tokens: usize,
}

/// Cuts a pass's tokens into [`QueryBlock`]s of at most [`QUERY_TOKENS`], each within one sequence at
/// consecutive positions.
fn query_blocks(at: &[TokenAt], out: &mut Vec<QueryBlock>) {
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
type AttentionKernel<'a, T> = dyn Fn(&GroupQueries<'_>, &CachedHead<'_, T>, &mut [f32]) + Sync + 'a;

/// One layer's attention inputs: the queries of a pass and the cache they attend to.
struct AttentionInputs<'a, T> {
    pass: &'a Pass<'a>,
    layer: usize,
    kv_dim: usize,
    q: &'a [f32],
    keys: &'a [T],
    values: &'a [T],
    kernel: &'a AttentionKernel<'a, T>,
    window: Option<usize>,
}

/// Activations of a forward pass, sized for its tokens by [`Buffers::prepare`].
#[derive(Default)]
struct Buffers {
    x: Vec<f32>,
    xb: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    proj: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    combined: Vec<f32>,
    scratch: MatmulScratch,
    blocks: Vec<QueryBlock>,
    /// Per RoPE table, per token, per pair: the cosine and sine of its rotation (shared by every
    /// layer of the table and every head).
    rotations: Vec<Vec<[f32; 2]>>,
    /// Where each query block's attention output starts in `att`, and where the last one ends.
    block_bounds: Vec<usize>,
}

impl Buffers {
    /// Sizes every buffer for `n` tokens; capacity only grows.
    fn prepare(&mut self, config: &LlamaConfig, n: usize) {
        let (d, q, kv, f) = (config.dim, config.q_dim(), config.kv_dim(), config.ffn_dim);
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
        for buffer in [&mut self.gate, &mut self.up] {
            buffer.resize(n.min(FFN_TOKENS) * f, 0.0);
        }
    }
}

impl Llama {
    /// Loads the weights named by GGUF convention from `source`.
    ///
    /// # Errors
    /// When a tensor is missing, has the wrong shape or type, or the thread pool cannot start.
    pub fn load(
        config: LlamaConfig,
        source: &dyn TensorSource,
        options: LoadOptions,
    ) -> Result<Self> {
        // First, so that the weights (re-quantized or copied below) follow the memory policy.
        let placement = placement::apply(options.placement, &Topology::host())
            .map_err(|e| Error::model(source.origin(), e.to_string()))?;
        let loader = Loader {
            source,
            config: &config,
            target: options.weights,
        };
        let embedding = loader.matrix(
            "token_embd.weight",
            config.vocab_size,
            config.dim,
            loader.head_target("token_embd.weight")?,
        )?;
        let output = match source.tensor("output.weight")? {
            Some(_) => Some(loader.matrix(
                "output.weight",
                config.vocab_size,
                config.dim,
                loader.head_target("output.weight")?,
            )?),
            None => None,
        };
        let output_norm = loader.vector("output_norm.weight", config.dim)?;
        let layers = (0..config.n_layers)
            .map(|i| loader.layer(i))
            .collect::<Result<Vec<_>>>()?;
        let ropes = rope_tables(&config, loader.rope_factors()?.as_deref());
        let binding = placement.clone();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(options.threads)
            .thread_name(|i| format!("strata-engine-{i}"))
            .start_handler(move |i| {
                if let Err(e) = placement::bind_worker(&binding, i) {
                    tracing::warn!(worker = i, error = %e, "could not bind an engine worker to its CPU");
                }
            })
            .build()
            .map_err(|e| {
                Error::model(
                    source.origin(),
                    format!("cannot start the engine's thread pool: {e}"),
                )
            })?;
        Ok(Self {
            config,
            embedding,
            output,
            output_norm,
            layers,
            ropes,
            pool,
            placement,
            workspace: Mutex::default(),
        })
    }

    /// The placement policy in effect for this model's workers and memory.
    pub fn placement(&self) -> &Applied {
        &self.placement
    }

    /// The model's hyperparameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Threads in the engine's pool.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// The runtime type of the transformer blocks' matrices: the one holding most bytes when a file
    /// mixes types.
    pub fn weight_type(&self) -> WeightType {
        if self.layers.is_empty() {
            return self.embedding.kind();
        }
        WeightMix::of(self.layers.iter().flat_map(Layer::matrices)).main_type()
    }

    /// The runtime types of every matrix, with the bytes each holds.
    pub fn weight_mix(&self) -> WeightMix {
        let heads = std::iter::once(&self.embedding).chain(&self.output);
        WeightMix::of(heads.chain(self.layers.iter().flat_map(Layer::matrices)))
    }

    /// Bytes of weights held in memory.
    pub fn weight_bytes(&self) -> usize {
        self.layer_bytes()
            + self.embedding.byte_size()
            + self.output.as_ref().map_or(0, Weight::byte_size)
    }

    /// Bytes of weights one decoded token reads: every layer's matrices and norms and the output
    /// head (the embedding itself when tied), but not the embedding table, of which a token reads
    /// one row.
    pub fn decode_bytes_per_token(&self) -> usize {
        let head = self.output.as_ref().unwrap_or(&self.embedding);
        self.layer_bytes() + head.byte_size() + 4 * self.output_norm.len()
    }

    /// Bytes of every layer's matrices and norms.
    fn layer_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| {
                l.qkv.byte_size()
                    + l.gate_up.byte_size()
                    + l.wo.byte_size()
                    + l.w_down.byte_size()
                    + l.norm_bytes()
            })
            .sum()
    }

    /// A key/value cache in f16 (llama.cpp's default) sized for `capacity` positions.
    pub fn new_cache(&self, capacity: usize) -> KvCache {
        self.new_cache_with(capacity, KvType::default())
    }

    /// A key/value cache of `kind` sized for `capacity` positions.
    pub fn new_cache_with(&self, capacity: usize, kind: KvType) -> KvCache {
        KvCache::new(&self.config, capacity.min(self.config.context_length), kind)
    }

    /// Runs `tokens` at the positions after those already in `cache`, appending their keys and values,
    /// and returns logits (`vocab` values for [`Logits::Last`], `tokens.len() * vocab` for [`Logits::All`]).
    ///
    /// # Errors
    /// When `tokens` is empty, holds an id outside the vocabulary, or does not fit in the cache.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache, logits: Logits) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        self.forward_into(tokens, cache, logits, &mut out)?;
        Ok(out)
    }

    /// [`Self::forward`] into `out` (its contents replaced). After a first call with at least as many
    /// tokens, a call allocates nothing when made from inside the engine's pool ([`Self::install`]);
    /// from outside, the pool's own hand-over of the job may.
    ///
    /// # Errors
    /// As [`Self::forward`].
    pub fn forward_into(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        logits: Logits,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        self.check_tokens(tokens)?;
        if cache.kv_dim != self.config.kv_dim() || cache.n_layers != self.config.n_layers {
            return Err(Error::InvalidRequest(
                "the key/value cache was made for another model".into(),
            ));
        }
        if cache.len + tokens.len() > cache.capacity() {
            return Err(Error::InvalidRequest(format!(
                "{} cached + {} new tokens exceed the context of {} positions",
                cache.len,
                tokens.len(),
                cache.capacity()
            )));
        }
        let start = cache.len;
        let mut workspace = self
            .workspace
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let ws = &mut *workspace;
        ws.at.clear();
        ws.at.extend((0..tokens.len()).map(|t| TokenAt {
            seq: 0,
            pos: start + t,
        }));
        ws.logit_rows.clear();
        match logits {
            Logits::Last => ws.logit_rows.push(tokens.len() - 1),
            Logits::All => ws.logit_rows.extend(0..tokens.len()),
        }
        let layouts = [cache.layout()];
        let pass = Pass {
            tokens,
            at: &ws.at,
            layouts: &layouts,
            logit_rows: &ws.logit_rows,
        };
        let kv_dim = cache.kv_dim;
        self.pool.install(|| {
            self.run_pass(&pass, &mut cache.storage, kv_dim, &mut ws.buffers, out);
        });
        cache.len = start + tokens.len();
        Ok(())
    }

    /// Runs `op` on one of the engine's threads: forward passes inside it run without handing their
    /// work over from another thread.
    pub fn install<R: Send>(&self, op: impl FnOnce() -> R + Send) -> R {
        self.pool.install(op)
    }

    /// Runs one step for several sequences at once over a shared [`PagedKv`]: every sequence's tokens
    /// go through each weight matrix in one pass. Each sequence's keys and values are appended after
    /// its `start` positions, in the blocks its table names. Returns, per sequence, the logits of its
    /// last token when it asked for them.
    ///
    /// # Errors
    /// When a sequence has no tokens, an id outside the vocabulary, positions beyond the context, or a
    /// block table that does not cover its positions or names a block outside the pool.
    pub fn forward_batch(
        &self,
        batch: &[BatchSeq<'_>],
        kv: &mut PagedKv,
    ) -> Result<Vec<Option<Vec<f32>>>> {
        if kv.kv_dim != self.config.kv_dim() || kv.n_layers != self.config.n_layers {
            return Err(Error::InvalidRequest(
                "the key/value pool was made for another model".into(),
            ));
        }
        let mut tokens = Vec::new();
        let mut layouts = Vec::with_capacity(batch.len());
        let mut workspace = self
            .workspace
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let ws = &mut *workspace;
        ws.at.clear();
        ws.logit_rows.clear();
        let mut wants = Vec::with_capacity(batch.len());
        for (index, seq) in batch.iter().enumerate() {
            self.check_batch_seq(seq, kv)?;
            tokens.extend_from_slice(seq.tokens);
            ws.at.extend((0..seq.tokens.len()).map(|t| TokenAt {
                seq: index,
                pos: seq.start + t,
            }));
            layouts.push(kv.layout(seq.blocks));
            if seq.logits {
                ws.logit_rows.push(tokens.len() - 1);
            }
            wants.push(seq.logits);
        }
        if tokens.is_empty() {
            return Ok(vec![None; batch.len()]);
        }
        let pass = Pass {
            tokens: &tokens,
            at: &ws.at,
            layouts: &layouts,
            logit_rows: &ws.logit_rows,
        };
        let kv_dim = kv.kv_dim;
        let mut logits = Vec::new();
        self.pool.install(|| {
            self.run_pass(&pass, &mut kv.storage, kv_dim, &mut ws.buffers, &mut logits);
        });
        let vocab = self.config.vocab_size;
        let mut rows = logits.chunks_exact(vocab);
        Ok(wants
            .into_iter()
            .map(|w| w.then(|| rows.next().map(<[f32]>::to_vec).unwrap_or_default()))
            .collect())
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<()> {
        if tokens.is_empty() {
            return Err(Error::InvalidRequest("no tokens to evaluate".into()));
        }
        if let Some(bad) = tokens
            .iter()
            .find(|&&t| t as usize >= self.config.vocab_size)
        {
            return Err(Error::InvalidRequest(format!(
                "token id {bad} is outside the vocabulary of {} tokens",
                self.config.vocab_size
            )));
        }
        Ok(())
    }

    fn check_batch_seq(&self, seq: &BatchSeq<'_>, kv: &PagedKv) -> Result<()> {
        self.check_tokens(seq.tokens)?;
        let end = seq.start + seq.tokens.len();
        if end > self.config.context_length {
            return Err(Error::InvalidRequest(format!(
                "{} cached + {} new tokens exceed the context of {} positions",
                seq.start,
                seq.tokens.len(),
                self.config.context_length
            )));
        }
        if seq.blocks.len() * kv.block_size() < end {
            return Err(Error::InvalidRequest(format!(
                "a block table of {} blocks cannot hold {end} positions",
                seq.blocks.len()
            )));
        }
        if let Some(bad) = seq.blocks.iter().find(|&&b| b as usize >= kv.n_blocks()) {
            return Err(Error::InvalidRequest(format!(
                "block {bad} is outside the pool of {} blocks",
                kv.n_blocks()
            )));
        }
        Ok(())
    }

    /// The forward pass over every token of `pass`; writes the logits of its `logit_rows` to `out`.
    /// A small pass (decode steps) runs its loops on a [`team::Team`] of the pool's threads, a larger
    /// one as fork-joins on the pool; the results are the same.
    fn run_pass(
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

    fn run_layers(
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
            self.attention_block(split, index, layer, b, pass, storage, kv_dim);
            self.ffn_block(split, layer, b, n);
        }
        self.head(split, b, pass.logit_rows, out);
    }

    #[allow(clippy::too_many_arguments)]
    fn attention_block(
        &self,
        split: Split<'_>,
        index: usize,
        layer: &Layer,
        b: &mut Buffers,
        pass: &Pass<'_>,
        storage: &mut KvStorage,
        kv_dim: usize,
    ) {
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
    fn add_block_output(&self, split: Split<'_>, post_norm: Option<&[f32]>, b: &mut Buffers) {
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
    fn attend_blocks<T: Sync>(
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
    fn attend_block<T: Sync>(
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
    /// activations (gate and up) are then held for that many tokens, not for a whole prompt; every
    /// token's result is the same whichever tokens share its product.
    fn ffn_block(&self, split: Split<'_>, layer: &Layer, b: &mut Buffers, n: usize) {
        let c = &self.config;
        let (d, f) = (c.dim, c.ffn_dim);
        rms_norm(split, &b.x, &layer.ffn_norm, c.rms_eps, &mut b.xb);
        for first in (0..n).step_by(FFN_TOKENS) {
            let m = FFN_TOKENS.min(n - first);
            let (gate, up) = (&mut b.gate[..m * f], &mut b.up[..m * f]);
            layer.gate_up.matmul(
                split,
                &b.xb[first * d..(first + m) * d],
                m,
                &mut [&mut *gate, &mut *up],
                &mut b.combined,
                &mut b.scratch,
            );
            gated_activation(split, c.activation, f, gate, up);
            let proj = &mut b.proj[first * d..(first + m) * d];
            matmul(split, &layer.w_down, gate, m, proj, &mut b.scratch);
        }
        self.add_block_output(split, layer.post_ffn_norm.as_deref(), b);
    }

    fn head(&self, split: Split<'_>, b: &mut Buffers, logit_rows: &[usize], out: &mut Vec<f32>) {
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
    fn rotations(&self, pass: &Pass<'_>, out: &mut Vec<Vec<[f32; 2]>>) {
        out.resize_with(self.ropes.len(), Vec::new);
        for (table, freqs) in out.iter_mut().zip(&self.ropes) {
            table.clear();
            for at in pass.at {
                table.extend(freqs.iter().map(|&freq| {
                    let theta = at.pos as f64 * freq;
                    [theta.cos() as f32, theta.sin() as f32]
                }));
            }
        }
    }

    /// RoPE of every row of `x` (one token's q or k, `width` wide) by its token's `rotations`.
    fn rope_rows(&self, split: Split<'_>, x: &mut [f32], width: usize, rotations: &[[f32; 2]]) {
        let half = self.config.head_dim / 2;
        split.chunks_mut(x, width * ELEMENTWISE_TOKENS, |task, rows| {
            for (i, row) in rows.chunks_exact_mut(width).enumerate() {
                let t = task * ELEMENTWISE_TOKENS + i;
                self.rope(row, &rotations[t * half..(t + 1) * half]);
            }
        });
    }

    /// Rotates every head of `x` (one token's q or k) by its position's `rotations`.
    fn rope(&self, x: &mut [f32], rotations: &[[f32; 2]]) {
        let hd = self.config.head_dim;
        let half = hd / 2;
        for head in x.chunks_exact_mut(hd) {
            for (i, &[cos, sin]) in rotations.iter().enumerate() {
                let (a, b) = match self.config.rope_style {
                    RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                    RopeStyle::Neox => (i, i + half),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * cos - x1 * sin;
                head[b] = x0 * sin + x1 * cos;
            }
        }
    }
}

/// Reads and checks tensors for [`Llama::load`].
struct Loader<'a> {
    source: &'a dyn TensorSource,
    config: &'a LlamaConfig,
    target: Option<WeightType>,
}

impl Loader<'_> {
    fn require(&self, name: &str) -> Result<RawTensor<'_>> {
        self.source
            .tensor(name)?
            .ok_or_else(|| Error::model(self.source.origin(), format!("tensor {name} is missing")))
    }

    /// The type of the embedding / output head when the blocks are requantized: never below six
    /// bits when the blocks run in fewer (as llama.cpp's quantizer keeps them), unless the file itself
    /// holds it in fewer.
    fn head_target(&self, name: &str) -> Result<Option<WeightType>> {
        let Some(target) = self.target else {
            return Ok(None);
        };
        if !target.is_low_bit() {
            return Ok(Some(target));
        }
        let file_kind = self
            .source
            .tensor(name)?
            .map(|t| WeightType::of_file_type(t.kind));
        Ok(match file_kind {
            Some(kind) if kind.is_quantized() => Some(kind),
            _ => Some(WeightType::Q8_0),
        })
    }

    fn matrix(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        target: Option<WeightType>,
    ) -> Result<Weight> {
        let raw = self.checked(name, rows, cols, target)?;
        let held = target.unwrap_or(WeightType::of_file_type(raw.kind));
        let mut builder = WeightBuilder::new(held, rows, cols);
        self.copy_into(name, raw, &mut builder)?;
        Ok(builder.finish())
    }

    /// Matrices that read the same input (`(name, rows)` each, `cols` wide), read into one stacked
    /// matrix when they are held in one type (no copy of the parts is ever held beside it), else
    /// apart.
    fn stacked(
        &self,
        parts: &[(String, usize)],
        cols: usize,
        target: Option<WeightType>,
    ) -> Result<Stacked> {
        let raws = parts
            .iter()
            .map(|(name, rows)| self.checked(name, *rows, cols, target))
            .collect::<Result<Vec<_>>>()?;
        let widths: Vec<usize> = parts.iter().map(|&(_, rows)| rows).collect();
        let held = |raw: &RawTensor<'_>| target.unwrap_or(WeightType::of_file_type(raw.kind));
        let first = held(&raws[0]);
        if raws.iter().any(|raw| held(raw) != first) {
            let weights = parts
                .iter()
                .zip(raws)
                .map(|((name, rows), raw)| {
                    let mut builder = WeightBuilder::new(held(&raw), *rows, cols);
                    self.copy_into(name, raw, &mut builder)?;
                    Ok(builder.finish())
                })
                .collect::<Result<Vec<_>>>()?;
            return Ok(Stacked::apart(weights));
        }
        let mut builder = WeightBuilder::new(first, widths.iter().sum(), cols);
        for ((name, _), raw) in parts.iter().zip(raws) {
            self.copy_into(name, raw, &mut builder)?;
        }
        Ok(Stacked::fused(builder.finish(), widths))
    }

    /// Tensor `name`, checked to be a `rows x cols` matrix whose rows are whole blocks of its file
    /// type and of `target`.
    fn checked(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        target: Option<WeightType>,
    ) -> Result<RawTensor<'_>> {
        let raw = self.require(name)?;
        let want = [cols as u64, rows as u64];
        if raw.dims != want {
            return Err(Error::model(
                self.source.origin(),
                format!("tensor {name} has shape {:?}, expected {want:?}", raw.dims),
            ));
        }
        let effective = target.unwrap_or(WeightType::of_file_type(raw.kind));
        let block = effective.block_size().max(raw.kind.block_size());
        if !cols.is_multiple_of(block) {
            return Err(Error::model(
                self.source.origin(),
                format!(
                    "tensor {name}: row length {cols} is not a multiple of the block size {block} of {effective}"
                ),
            ));
        }
        check_len(self.source, name, &raw, rows * cols)?;
        Ok(raw)
    }

    /// Appends the rows of `raw` (tensor `name`) to `builder` in pieces, checking each piece's block
    /// scales and handing its bytes back to the source once copied.
    fn copy_into(&self, name: &str, raw: RawTensor<'_>, builder: &mut WeightBuilder) -> Result<()> {
        let row_bytes = builder.row_bytes(raw.kind);
        let piece_bytes = row_bytes * (LOAD_PIECE_BYTES / row_bytes).max(1);
        for (i, piece) in raw.data.chunks(piece_bytes).enumerate() {
            quant::check_block_scales(raw.kind, piece).map_err(|err| {
                let block = err.block + i * piece_bytes / raw.kind.block_bytes();
                let err = quant::NonFiniteScale { block, ..err };
                Error::model(self.source.origin(), format!("tensor {name}: {err}"))
            })?;
            builder.push_rows(raw.kind, piece);
            let start = i * piece_bytes;
            self.source.release_part(name, start..start + piece.len());
        }
        drop(raw);
        self.source.release(name);
        Ok(())
    }

    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let raw = self.require(name)?;
        self.vector_from(name, raw, len)
    }

    fn optional_vector(&self, name: &str, len: usize) -> Result<Option<Vec<f32>>> {
        match self.source.tensor(name)? {
            Some(raw) => self.vector_from(name, raw, len).map(Some),
            None => Ok(None),
        }
    }

    fn vector_from(&self, name: &str, raw: RawTensor<'_>, len: usize) -> Result<Vec<f32>> {
        if raw.dims != [len as u64] {
            return Err(Error::model(
                self.source.origin(),
                format!("tensor {name} has shape {:?}, expected [{len}]", raw.dims),
            ));
        }
        if raw.kind.block_size() != 1 {
            return Err(Error::model(
                self.source.origin(),
                format!("tensor {name}: {} vectors are not supported", raw.kind),
            ));
        }
        check_len(self.source, name, &raw, len)?;
        let mut out = vec![0.0; len];
        quant::dequantize_bytes(raw.kind, &raw.data, &mut out);
        Ok(out)
    }

    /// A vector the architecture has (`Some`, required) or does not have (`None`, not read).
    fn vector_if(&self, has: bool, name: &str, len: usize) -> Result<Option<Vec<f32>>> {
        has.then(|| self.vector(name, len)).transpose()
    }

    /// Llama 3's per-pair RoPE frequency divisors (`rope_freqs.weight`), which llama.cpp applies
    /// for the `llama` architecture only.
    fn rope_factors(&self) -> Result<Option<Vec<f32>>> {
        if self.config.architecture != "llama" {
            return Ok(None);
        }
        let factors = self.optional_vector("rope_freqs.weight", self.config.head_dim / 2)?;
        if let Some(bad) = factors
            .iter()
            .flatten()
            .find(|f| !(f.is_finite() && **f > 0.0))
        {
            return Err(Error::model(
                self.source.origin(),
                format!("tensor rope_freqs.weight holds {bad}, not a positive frequency factor"),
            ));
        }
        Ok(factors)
    }

    fn layer(&self, i: usize) -> Result<Layer> {
        let c = self.config;
        let (d, q, kv, f, hd) = (c.dim, c.q_dim(), c.kv_dim(), c.ffn_dim, c.head_dim);
        let name = |suffix: &str| format!("blk.{i}.{suffix}");
        let t = self.target;
        let window = c.window_of(i);
        Ok(Layer {
            attn_norm: self.vector(&name("attn_norm.weight"), d)?,
            qkv: self.stacked(
                &[
                    (name("attn_q.weight"), q),
                    (name("attn_k.weight"), kv),
                    (name("attn_v.weight"), kv),
                ],
                d,
                t,
            )?,
            wo: self.matrix(&name("attn_output.weight"), d, q, t)?,
            bq: self.optional_vector(&name("attn_q.bias"), q)?,
            bk: self.optional_vector(&name("attn_k.bias"), kv)?,
            bv: self.optional_vector(&name("attn_v.bias"), kv)?,
            q_norm: self.vector_if(c.qk_norm, &name("attn_q_norm.weight"), hd)?,
            k_norm: self.vector_if(c.qk_norm, &name("attn_k_norm.weight"), hd)?,
            post_attn_norm: self.vector_if(c.post_norms, &name("post_attention_norm.weight"), d)?,
            ffn_norm: self.vector(&name("ffn_norm.weight"), d)?,
            gate_up: self.stacked(
                &[(name("ffn_gate.weight"), f), (name("ffn_up.weight"), f)],
                d,
                t,
            )?,
            w_down: self.matrix(&name("ffn_down.weight"), d, f, t)?,
            post_ffn_norm: self.vector_if(c.post_norms, &name("post_ffw_norm.weight"), d)?,
            window,
            rope: if window.is_some() {
                SLIDING_ROPE
            } else {
                GLOBAL_ROPE
            },
        })
    }
}

fn check_len(
    source: &dyn TensorSource,
    name: &str,
    raw: &RawTensor<'_>,
    elements: usize,
) -> Result<()> {
    let kind: GgmlType = raw.kind;
    let want = elements / kind.block_size() * kind.block_bytes();
    if raw.data.len() != want {
        return Err(Error::model(
            source.origin(),
            format!(
                "tensor {name} holds {} bytes, its shape and type need {want}",
                raw.data.len()
            ),
        ));
    }
    Ok(())
}

/// Tokens per parallel task of the element-wise steps (norms, RoPE, SwiGLU, residual adds): a few
/// tokens stay on one thread, a prompt spreads over the pool.
const ELEMENTWISE_TOKENS: usize = 16;
/// Most tokens of a pass that runs on a team: decode steps, whose element-wise steps are one task.
const TEAM_TOKENS: usize = ELEMENTWISE_TOKENS;

/// Tokens of a pass per feed-forward step ([`Llama::ffn_block`]): enough to give every thread whole
/// tiled tasks, few enough that the gate and up activations of a long prompt stay small.
const FFN_TOKENS: usize = 128;

/// `gate = activation(gate) * up`, element by element, for tokens of `width` values.
fn gated_activation(
    split: Split<'_>,
    activation: Activation,
    width: usize,
    gate: &mut [f32],
    up: &[f32],
) {
    let width = width * ELEMENTWISE_TOKENS;
    split.chunks_mut(gate, width, |task, gate| {
        let up = &up[task * width..];
        match activation {
            Activation::Silu => {
                for (g, &u) in gate.iter_mut().zip(up) {
                    *g = silu(*g) * u;
                }
            }
            Activation::GeluTanh => {
                for (g, &u) in gate.iter_mut().zip(up) {
                    *g = gelu_gate(*g, u);
                }
            }
        }
    });
}

/// A product of the pass's loops on `split` with the process's kernel tier.
fn matmul(
    split: Split<'_>,
    w: &Weight,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    kernels::matmul_split(kernels::dispatch::table(), split, w, x, n, out, scratch);
}

/// RMS norm of every row of `x` (rows of `weight.len()`), scaled by `weight`, into `out`.
fn rms_norm(split: Split<'_>, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let width = weight.len() * ELEMENTWISE_TOKENS;
    split.chunks_mut(out, width, |task, out| {
        rms_norm_rows(&x[task * width..], weight, eps, out);
    });
}

/// Per row of `dim` values: `out = x / sqrt(mean(x^2) + eps) * weight`.
fn rms_norm_rows(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let dim = weight.len();
    for (xr, or) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let scale = rms_scale(xr, eps);
        for ((o, &v), &w) in or.iter_mut().zip(xr).zip(weight) {
            *o = v * scale * w;
        }
    }
}

/// `1 / sqrt(mean(x^2) + eps)`, the sum in f64.
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let mean = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / x.len() as f64;
    (1.0 / (mean + eps as f64).sqrt()) as f32
}

/// RMS norm in place of every head of `x` (rows of `weight.len()`, the head size), as Qwen3 and
/// Gemma 3 norm their queries and keys.
fn rms_norm_heads(split: Split<'_>, x: &mut [f32], weight: &[f32], eps: f32) {
    let width = weight.len() * ELEMENTWISE_TOKENS;
    split.chunks_mut(x, width, |_, heads| {
        for head in heads.chunks_exact_mut(weight.len()) {
            let scale = rms_scale(head, eps);
            for (v, &w) in head.iter_mut().zip(weight) {
                *v = *v * scale * w;
            }
        }
    });
}

/// The inverse frequency of every RoPE pair, per table: the global layers' (`rope_theta`, linear
/// scaling, Llama 3's per-pair divisors as ggml applies them: the angle divided by the pair's
/// factor, then multiplied by the scale), then, when some layers slide, theirs (their own base,
/// neither scaled nor divided).
fn rope_tables(config: &LlamaConfig, factors: Option<&[f32]>) -> Vec<Vec<f64>> {
    let hd = config.head_dim;
    let inv_freq = |base: f32| -> Vec<f64> {
        (0..hd / 2)
            .map(|i| f64::from(base).powf(-2.0 * i as f64 / hd as f64))
            .collect()
    };
    let scale = config.rope_scaling.map_or(1.0, |f| 1.0 / f64::from(f));
    let global = inv_freq(config.rope_theta)
        .into_iter()
        .enumerate()
        .map(|(i, freq)| {
            let factor = factors
                .and_then(|f| f.get(i))
                .map_or(1.0, |&f| f64::from(f));
            freq / factor * scale
        })
        .collect();
    let mut tables = vec![global];
    if let Some(window) = &config.sliding_window {
        debug_assert_eq!(tables.len(), SLIDING_ROPE);
        tables.push(inv_freq(window.rope_theta));
    }
    tables
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU in its tanh form, in f32, as ggml's `ggml_gelu_f32`.
fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044_715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + COEF_A * x * x)).tanh())
}

/// GELU of every f16 value, rounded to f16: ggml's table, indexed by the bits of the input.
fn gelu_table() -> &'static [f16] {
    static TABLE: OnceLock<Vec<f16>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| f16::from_f32(gelu_tanh(f16::from_bits(bits).to_f32())))
            .collect()
    })
}

/// `gelu(gate) * up` as ggml's CPU GeGLU computes it: the gate rounded to f16 and looked up in the
/// f16 GELU table, except beyond ±10 where GELU is 0 or the identity.
fn gelu_gate(gate: f32, up: f32) -> f32 {
    if gate <= -10.0 {
        0.0
    } else if gate >= 10.0 {
        gate * up
    } else {
        let bits = f16::from_f32(gate).to_bits();
        gelu_table()[usize::from(bits)].to_f32() * up
    }
}

fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// The residual add `x += y` of whole activations (rows of `dim`), split over the threads.
fn add_residual(split: Split<'_>, x: &mut [f32], y: &[f32], dim: usize) {
    let width = dim * ELEMENTWISE_TOKENS;
    split.chunks_mut(x, width, |task, x| add_in_place(x, &y[task * width..]));
}

fn add_bias(x: &mut [f32], bias: Option<&[f32]>) {
    if let Some(bias) = bias {
        for row in x.chunks_exact_mut(bias.len()) {
            add_in_place(row, bias);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::SlidingWindow;

    /// GELU by its definition with the exact tanh, in f64.
    fn gelu_exact(x: f64) -> f64 {
        0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044_715 * x * x * x)).tanh())
    }

    #[test]
    fn geglu_follows_ggml_f16_table_and_its_cutoffs() {
        for i in -1200..=1200 {
            let x = i as f32 / 100.0;
            let got = gelu_gate(x, 1.0);
            if x <= -10.0 {
                assert_eq!(got, 0.0, "gelu({x})");
                continue;
            }
            if x >= 10.0 {
                assert_eq!(got, x, "gelu({x})");
                continue;
            }
            // An f16 input and output: within a few f16 steps of the exact value.
            let want = gelu_exact(f64::from(f16::from_f32(x).to_f32()));
            assert!(
                (f64::from(got) - want).abs() <= 2e-3 * (1.0 + want.abs()),
                "gelu({x}) = {got}, want {want}"
            );
            assert_eq!(
                f16::from_f32(got).to_f32(),
                got,
                "gelu({x}) is an f16 value"
            );
        }
        assert_eq!(gelu_gate(1.5, -2.0), gelu_gate(1.5, 1.0) * -2.0);
        assert_eq!(gelu_gate(12.0, 0.5), 6.0);
    }

    fn config(head_dim: usize) -> LlamaConfig {
        LlamaConfig {
            architecture: "llama".into(),
            n_layers: 2,
            dim: 64,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim,
            ffn_dim: 128,
            vocab_size: 300,
            rope_theta: 500_000.0,
            rope_scaling: None,
            rope_style: RopeStyle::Interleaved,
            rms_eps: 1e-5,
            context_length: 128,
            qk_norm: false,
            post_norms: false,
            activation: Activation::Silu,
            embedding_scale: None,
            query_scale: None,
            sliding_window: None,
            final_logit_softcap: None,
        }
    }

    #[test]
    fn rope_tables_apply_factors_scaling_and_the_sliding_base() {
        let plain = rope_tables(&config(8), None);
        assert_eq!(plain.len(), 1);
        let want: Vec<f64> = (0..4).map(|i| 500_000f64.powf(-(i as f64) / 4.0)).collect();
        assert_eq!(plain[0], want);

        let factors = [1.0, 2.0, 4.0, 8.0];
        let divided = rope_tables(&config(8), Some(&factors));
        for ((&got, &base), &factor) in divided[0].iter().zip(&want).zip(&factors) {
            assert_eq!(got, base / f64::from(factor));
        }

        let mut gemma = config(8);
        gemma.rope_scaling = Some(8.0);
        gemma.sliding_window = Some(SlidingWindow {
            size: 4,
            layers: vec![true, false],
            rope_theta: 10_000.0,
        });
        let tables = rope_tables(&gemma, None);
        assert_eq!(tables.len(), 2);
        for (&got, &base) in tables[GLOBAL_ROPE].iter().zip(&want) {
            assert_eq!(got, base / 8.0, "global layers scaled");
        }
        let sliding: Vec<f64> = (0..4).map(|i| 10_000f64.powf(-(i as f64) / 4.0)).collect();
        assert_eq!(
            tables[SLIDING_ROPE], sliding,
            "sliding layers: own base, unscaled"
        );
    }

    #[test]
    fn head_norms_norm_each_head_on_its_own() {
        let weight = [1.0, 2.0];
        let mut x = vec![3.0, 4.0, 0.0, 0.5, -1.0, 1.0];
        rms_norm_heads(Split::Here, &mut x, &weight, 0.0);
        let expected = [
            3.0 / 12.5f32.sqrt(),
            8.0 / 12.5f32.sqrt(),
            0.0,
            1.0 / 0.125f32.sqrt(),
            -1.0,
            2.0,
        ];
        for (got, want) in x.iter().zip(expected) {
            assert!((got - want).abs() < 1e-6, "{x:?}");
        }
    }
}
