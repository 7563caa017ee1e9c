//! The Llama-family forward pass over a key/value cache, batched over the tokens of one or many
//! sequences: RMSNorm, RoPE, grouped-query attention, a gated feed-forward, tied or untied head, and
//! what Qwen3 and Gemma 3 add as llama.cpp builds them (per-head Q/K norms, post-norms, GeGLU, scaled
//! embeddings and queries, sliding-window layers with their own RoPE base, a soft-capped head).

mod blocks;
mod ops;
mod pass;
#[cfg(test)]
mod tests;
mod weights;

use std::sync::{Mutex, PoisonError};

use crate::{
    error::{Error, Result},
    format::TensorSource,
    model::{
        config::LlamaConfig,
        kv::{KvCache, KvType, PagedKv},
    },
    placement::{self, Applied, Placement, Topology},
    weights::{Weight, WeightMix, WeightType},
};

use self::{
    ops::{RopeTable, rope_tables},
    pass::{Pass, TokenAt, Workspace},
    weights::{Layer, Loader},
};

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

/// Tokens one pass of [`Llama::forward`] runs at most: a long prompt runs as several passes, so that
/// its activations stay at this many tokens' worth (llama.cpp's micro-batch).
pub const PASS_TOKENS: usize = 128;

/// The token ranges a call of `n` tokens runs as, passes of at most `max` tokens (a multiple of 8,
/// at least 16). Every pass but the last holds a multiple of 8 tokens, and the last at least 8 when
/// `n` is: a token's kernel path depends on whether its product has 8 tokens or more and on the whole
/// groups of 4 from the product's start (see `kernels::k_numerics`), so each token takes the path it
/// would take in one pass and the split changes no bit.
fn pass_ranges(n: usize, max: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    debug_assert!(max >= 16 && max.is_multiple_of(8));
    let mut start = 0;
    std::iter::from_fn(move || {
        let left = n - start;
        let len = match left {
            0 => return None,
            _ if left <= max => left,
            _ if left - max < 8 => max - 8,
            _ => max,
        };
        start += len;
        Some(start - len..start)
    })
}

/// Which positions of a forward pass need logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's (generation).
    Last,
    /// Every token's (perplexity, scoring).
    All,
}

/// A loaded Llama-family model with its own thread pool.
pub struct Llama {
    config: LlamaConfig,
    embedding: Weight,
    output: Option<Weight>,
    output_norm: Vec<f32>,
    layers: Vec<Layer>,
    /// Per RoPE table (global layers, then sliding-window layers when there are any): the angle per
    /// position of each pair.
    ropes: Vec<RopeTable>,
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
        self.forward_in_passes(tokens, cache, logits, out, PASS_TOKENS);
        Ok(())
    }

    /// Runs checked `tokens` as passes of at most `max_pass` tokens ([`pass_ranges`]), each after the
    /// keys and values of the ones before it, and gathers the logits asked for.
    fn forward_in_passes(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        logits: Logits,
        out: &mut Vec<f32>,
        max_pass: usize,
    ) {
        let start = cache.len;
        let mut workspace = self
            .workspace
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let ws = &mut *workspace;
        let layouts = [cache.layout()];
        let kv_dim = cache.kv_dim;
        let single = tokens.len() <= max_pass;
        out.clear();
        for range in pass_ranges(tokens.len(), max_pass) {
            let n = range.len();
            ws.at.clear();
            ws.at.extend((range.clone()).map(|t| TokenAt {
                seq: 0,
                pos: start + t,
            }));
            ws.logit_rows.clear();
            match logits {
                Logits::Last if range.end == tokens.len() => ws.logit_rows.push(n - 1),
                Logits::Last => {}
                Logits::All => ws.logit_rows.extend(0..n),
            }
            let pass = Pass {
                tokens: &tokens[range],
                at: &ws.at,
                layouts: &layouts,
                call_tokens: &[tokens.len()],
                logit_rows: &ws.logit_rows,
            };
            // One pass writes its logits straight to `out`; several add theirs one after another.
            let target = if single || logits == Logits::Last {
                &mut *out
            } else {
                &mut ws.logits
            };
            self.pool.install(|| {
                self.run_pass(&pass, &mut cache.storage, kv_dim, &mut ws.buffers, target);
            });
            if !single && logits == Logits::All {
                out.extend_from_slice(&ws.logits);
            }
        }
        cache.len = start + tokens.len();
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
        let call_tokens: Vec<usize> = batch.iter().map(|seq| seq.tokens.len()).collect();
        let pass = Pass {
            tokens: &tokens,
            at: &ws.at,
            layouts: &layouts,
            call_tokens: &call_tokens,
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
}
