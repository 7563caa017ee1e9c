//! The model's weights as the forward pass holds them (Q/K/V and gate/up stacked, one [`Layer`]
//! per block) and the loader that reads and checks them from a [`TensorSource`].

use super::ops::{GLOBAL_ROPE, SLIDING_ROPE, matmul};
use crate::{
    error::{Error, Result},
    format::{RawTensor, TensorSource},
    kernels::MatmulScratch,
    model::config::LlamaConfig,
    quant::{self, GgmlType},
    team::Split,
    weights::{Weight, WeightBuilder, WeightType},
};

/// Bytes of a tensor copied out of a mapped file before they are handed back: the most the loader
/// holds twice at a time.
const LOAD_PIECE_BYTES: usize = 8 << 20;

/// Matrices that read the same input (Q, K, V; gate, up), stacked into one so that the input is
/// converted once and the pool runs one parallel pass; kept apart when their types differ.
pub(super) struct Stacked {
    pub(super) fused: Option<Weight>,
    pub(super) parts: Vec<Weight>,
    pub(super) widths: Vec<usize>,
}

impl Stacked {
    /// One matrix holding parts of `widths` rows, in order.
    pub(super) fn fused(fused: Weight, widths: Vec<usize>) -> Self {
        Self {
            fused: Some(fused),
            parts: Vec::new(),
            widths,
        }
    }

    /// Matrices of different types, multiplied one by one.
    pub(super) fn apart(parts: Vec<Weight>) -> Self {
        Self {
            fused: None,
            widths: parts.iter().map(|p| p.rows).collect(),
            parts,
        }
    }

    /// The matrices, fused or apart.
    pub(super) fn matrices(&self) -> impl Iterator<Item = &Weight> {
        self.fused.iter().chain(&self.parts)
    }

    pub(super) fn byte_size(&self) -> usize {
        self.fused
            .iter()
            .chain(&self.parts)
            .map(Weight::byte_size)
            .sum()
    }

    /// `outs[i] = parts[i] x` for `n` input rows; `combined` is scratch.
    pub(super) fn matmul(
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

pub(super) struct Layer {
    pub(super) attn_norm: Vec<f32>,
    pub(super) qkv: Stacked,
    pub(super) wo: Weight,
    pub(super) bq: Option<Vec<f32>>,
    pub(super) bk: Option<Vec<f32>>,
    pub(super) bv: Option<Vec<f32>>,
    /// Per-head RMSNorm weights of queries and keys (`head_dim` each).
    pub(super) q_norm: Option<Vec<f32>>,
    pub(super) k_norm: Option<Vec<f32>>,
    /// RMSNorm of the attention output before its residual add.
    pub(super) post_attn_norm: Option<Vec<f32>>,
    pub(super) ffn_norm: Vec<f32>,
    pub(super) gate_up: Stacked,
    pub(super) w_down: Weight,
    /// RMSNorm of the feed-forward output before its residual add.
    pub(super) post_ffn_norm: Option<Vec<f32>>,
    /// Positions a query sees when this is a sliding-window layer.
    pub(super) window: Option<usize>,
    /// Which of the model's RoPE tables this layer rotates by.
    pub(super) rope: usize,
}

impl Layer {
    /// The layer's matrices.
    pub(super) fn matrices(&self) -> impl Iterator<Item = &Weight> {
        self.qkv
            .matrices()
            .chain(self.gate_up.matrices())
            .chain([&self.wo, &self.w_down])
    }

    pub(super) fn norm_bytes(&self) -> usize {
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

/// Reads and checks tensors for [`Llama::load`].
pub(super) struct Loader<'a> {
    pub(super) source: &'a dyn TensorSource,
    pub(super) config: &'a LlamaConfig,
    pub(super) target: Option<WeightType>,
}

impl Loader<'_> {
    pub(super) fn require(&self, name: &str) -> Result<RawTensor<'_>> {
        self.source
            .tensor(name)?
            .ok_or_else(|| Error::model(self.source.origin(), format!("tensor {name} is missing")))
    }

    /// The type of the embedding / output head when the blocks are requantized: never below six
    /// bits when the blocks run in fewer (as llama.cpp's quantizer keeps them), unless the file itself
    /// holds it in fewer.
    pub(super) fn head_target(&self, name: &str) -> Result<Option<WeightType>> {
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

    pub(super) fn matrix(
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
    pub(super) fn stacked(
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
    pub(super) fn checked(
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
    pub(super) fn copy_into(
        &self,
        name: &str,
        raw: RawTensor<'_>,
        builder: &mut WeightBuilder,
    ) -> Result<()> {
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

    pub(super) fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let raw = self.require(name)?;
        self.vector_from(name, raw, len)
    }

    pub(super) fn optional_vector(&self, name: &str, len: usize) -> Result<Option<Vec<f32>>> {
        match self.source.tensor(name)? {
            Some(raw) => self.vector_from(name, raw, len).map(Some),
            None => Ok(None),
        }
    }

    pub(super) fn vector_from(
        &self,
        name: &str,
        raw: RawTensor<'_>,
        len: usize,
    ) -> Result<Vec<f32>> {
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
    pub(super) fn vector_if(&self, has: bool, name: &str, len: usize) -> Result<Option<Vec<f32>>> {
        has.then(|| self.vector(name, len)).transpose()
    }

    /// Llama 3's per-pair RoPE frequency divisors (`rope_freqs.weight`), which llama.cpp applies
    /// for the `llama` architecture only.
    pub(super) fn rope_factors(&self) -> Result<Option<Vec<f32>>> {
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

    pub(super) fn layer(&self, i: usize) -> Result<Layer> {
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
