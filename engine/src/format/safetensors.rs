//! Hugging Face checkpoint folders: `config.json`, `model.safetensors` (or the shards listed in
//! `model.safetensors.index.json`) and `tokenizer.json`, memory-mapped and served by GGUF tensor name.
//!
//! Tensors are borrowed from the maps; only Llama's Q/K projections are copied, to move their rows
//! from Hugging Face's half-split RoPE layout into GGUF's interleaved one (see [`permute_qk_rows`]).

use std::{
    borrow::Cow,
    collections::{BTreeMap, BTreeSet, HashMap},
    path::{Path, PathBuf},
};

use safetensors::{Dtype, SafeTensors};
use serde::{Deserialize, Serialize};

use crate::{
    error::{Error, Result},
    format::{RawTensor, TensorSource, mmap::FileBytes},
    model::config::{Activation, LlamaConfig, RopeStyle},
    quant::GgmlType,
};

/// The model's hyperparameters.
pub const CONFIG_FILE: &str = "config.json";
/// The weights when they fit in one file.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// The map from tensor name to shard file when the weights are sharded.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// The tokenizer.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// Special tokens, BOS policy and chat template.
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";

/// GGUF block tensor names and their Hugging Face counterparts (after `blk.N.` / `model.layers.N.`).
const LAYER_TENSORS: [(&str, &str); 9] = [
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_norm", "input_layernorm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// `config.json` of a Llama or Qwen2 checkpoint, as Hugging Face writes it.
///
/// Converted once into a validated [`LlamaConfig`] by [`HfLlamaConfig::to_llama_config`]; defaults
/// are those of `transformers`' `LlamaConfig`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HfLlamaConfig {
    /// Model classes, e.g. `["LlamaForCausalLM"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub architectures: Vec<String>,
    /// `llama` or `qwen2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_type: Option<String>,
    /// Hidden width.
    pub hidden_size: usize,
    /// Transformer blocks.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads; `num_attention_heads` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_key_value_heads: Option<usize>,
    /// Width of one head; `hidden_size / num_attention_heads` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    /// Feed-forward inner width.
    pub intermediate_size: usize,
    /// Rows of the embedding matrix.
    pub vocab_size: usize,
    /// RoPE base frequency.
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    /// RMSNorm epsilon.
    #[serde(default = "default_rms_norm_eps")]
    pub rms_norm_eps: f64,
    /// Trained context length.
    #[serde(default = "default_max_position_embeddings")]
    pub max_position_embeddings: usize,
    /// Whether the output head reuses the embedding matrix (no `lm_head.weight`).
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// The feed-forward activation; the engine runs `silu` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_act: Option<String>,
    /// RoPE scaling; the engine runs unscaled RoPE only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<serde_json::Value>,
    /// Whether Q/K/V have biases (Qwen2 has them without saying so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_bias: Option<bool>,
    /// Beginning-of-sequence token id (a number, sometimes a list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos_token_id: Option<serde_json::Value>,
    /// End-of-sequence token id (a number, sometimes a list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos_token_id: Option<serde_json::Value>,
    /// The weights' dtype name (`float32`, `float16`, `bfloat16`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_dtype: Option<String>,
}

fn default_rope_theta() -> f64 {
    10_000.0
}

fn default_rms_norm_eps() -> f64 {
    1e-6
}

fn default_max_position_embeddings() -> usize {
    2048
}

impl HfLlamaConfig {
    /// Reads and parses `config.json` at `path`.
    ///
    /// # Errors
    /// When the file cannot be read or is not a Llama-style config.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|e| Error::model(path, format!("invalid config: {e}")))
    }

    /// The architecture the engine runs this as (`llama` or `qwen2`), from `model_type` or else
    /// the first of `architectures`.
    pub fn architecture(&self) -> Option<&'static str> {
        let model_type =
            self.model_type
                .as_deref()
                .or(match self.architectures.first()?.as_str() {
                    "LlamaForCausalLM" => Some("llama"),
                    "Qwen2ForCausalLM" => Some("qwen2"),
                    _ => None,
                })?;
        match model_type {
            "llama" => Some("llama"),
            "qwen2" => Some("qwen2"),
            _ => None,
        }
    }

    /// Converts to the engine's validated hyperparameters; `path` names the file in errors.
    ///
    /// Llama gets [`RopeStyle::Interleaved`] because [`SafetensorsFolder`] permutes its Q/K rows
    /// as llama.cpp's converter does; Qwen2 keeps Hugging Face's [`RopeStyle::Neox`] halves.
    ///
    /// # Errors
    /// When the architecture, activation or RoPE scaling is not supported, or the sizes are inconsistent.
    pub fn to_llama_config(&self, path: &Path) -> Result<LlamaConfig> {
        let bad = |problem: String| Error::model(path, problem);
        let architecture = self.architecture().ok_or_else(|| {
            bad(format!(
                "model_type {:?} / architectures {:?} is not supported (supported: llama, qwen2)",
                self.model_type, self.architectures
            ))
        })?;
        if let Some(act) = self.hidden_act.as_deref().filter(|a| *a != "silu") {
            return Err(bad(format!(
                "hidden_act {act:?} is not supported (supported: silu)"
            )));
        }
        if let Some(scaling) = self.rope_scaling.as_ref().filter(|s| !s.is_null()) {
            let kind = scaling
                .get("rope_type")
                .or_else(|| scaling.get("type"))
                .and_then(|t| t.as_str())
                .unwrap_or("unknown");
            return Err(bad(format!(
                "rope_scaling of type {kind:?} is not supported"
            )));
        }
        let n_heads = self.num_attention_heads;
        let head_dim = match self.head_dim {
            Some(head_dim) => head_dim,
            None => self.hidden_size.checked_div(n_heads).unwrap_or(0),
        };
        let config = LlamaConfig {
            architecture: architecture.to_string(),
            n_layers: self.num_hidden_layers,
            dim: self.hidden_size,
            n_heads,
            n_kv_heads: self.num_key_value_heads.unwrap_or(n_heads),
            head_dim,
            ffn_dim: self.intermediate_size,
            vocab_size: self.vocab_size,
            rope_theta: self.rope_theta as f32,
            rope_style: match architecture {
                "llama" => RopeStyle::Interleaved,
                _ => RopeStyle::Neox,
            },
            rms_eps: self.rms_norm_eps as f32,
            context_length: self.max_position_embeddings,
            rope_scaling: None,
            qk_norm: false,
            post_norms: false,
            activation: Activation::Silu,
            embedding_scale: None,
            query_scale: None,
            sliding_window: None,
            final_logit_softcap: None,
        };
        config.validate().map_err(bad)?;
        Ok(config)
    }
}

/// The Hugging Face name of the tensor GGUF calls `gguf_name` (`blk.3.attn_q.weight` ->
/// `model.layers.3.self_attn.q_proj.weight`), or `None` for names without one.
pub fn hf_tensor_name(gguf_name: &str) -> Option<String> {
    match gguf_name {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        _ => {}
    }
    let (layer, rest) = gguf_name.strip_prefix("blk.")?.split_once('.')?;
    if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (part, kind) = rest.split_once('.')?;
    let (_, hf) = LAYER_TENSORS.iter().find(|(gguf, _)| *gguf == part)?;
    let is_norm = part.ends_with("_norm");
    match kind {
        "weight" => {}
        "bias" if !is_norm => {}
        _ => return None,
    }
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// Whether and how a GGUF-named tensor's rows move between RoPE layouts: `Some(heads)` for
/// Llama's Q (query heads) and K (key/value heads) weights and biases.
pub(crate) fn qk_permutation_heads(config: &LlamaConfig, gguf_name: &str) -> Option<usize> {
    if config.rope_style != RopeStyle::Interleaved {
        return None;
    }
    let part = gguf_name.strip_prefix("blk.")?.split_once('.')?.1;
    match part {
        "attn_q.weight" | "attn_q.bias" => Some(config.n_heads),
        "attn_k.weight" | "attn_k.bias" => Some(config.n_kv_heads),
        _ => None,
    }
}

/// Which way [`permute_qk_rows`] moves rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkLayout {
    /// From Hugging Face's halves (`x[i]` pairs with `x[i + d/2]`) to GGUF's adjacent pairs.
    ToInterleaved,
    /// From GGUF's adjacent pairs back to Hugging Face's halves.
    ToHalves,
}

/// Reorders the rows of a Q or K projection (`rows x row_len` values, `rows = n_head * head_dim`)
/// between RoPE layouts.
///
/// [`QkLayout::ToInterleaved`] is llama.cpp `convert_hf_to_gguf.py`'s `LlamaModel.permute`: rows
/// reshaped as `(n_head, 2, head_dim / 2)`, the last two axes swapped; [`QkLayout::ToHalves`]
/// undoes it. `None` when the rows do not split into `n_head` heads of even size.
pub fn permute_qk_rows<T: Copy>(
    values: &[T],
    row_len: usize,
    n_head: usize,
    layout: QkLayout,
) -> Option<Vec<T>> {
    if row_len == 0 || n_head == 0 || !values.len().is_multiple_of(row_len) {
        return None;
    }
    let rows = values.len() / row_len;
    if !rows.is_multiple_of(n_head) || !(rows / n_head).is_multiple_of(2) {
        return None;
    }
    let head_dim = rows / n_head;
    let half = head_dim / 2;
    let mut out = Vec::with_capacity(values.len());
    for row in 0..rows {
        let (head, i) = (row / head_dim, row % head_dim);
        let within = match layout {
            // Interleaved row 2j + s holds half-split row s * half + j.
            QkLayout::ToInterleaved => (i % 2) * half + i / 2,
            // Half-split row s * half + j holds interleaved row 2j + s.
            QkLayout::ToHalves => 2 * (i % half) + i / half,
        };
        let from = head * head_dim + within;
        out.extend_from_slice(&values[from * row_len..(from + 1) * row_len]);
    }
    Some(out)
}

/// The engine type of a safetensors dtype, for the float types the engine reads.
fn ggml_type(dtype: Dtype) -> Option<GgmlType> {
    match dtype {
        Dtype::F32 => Some(GgmlType::F32),
        Dtype::F16 => Some(GgmlType::F16),
        Dtype::BF16 => Some(GgmlType::BF16),
        _ => None,
    }
}

/// One mapped `.safetensors` file.
struct Shard {
    path: PathBuf,
    bytes: FileBytes,
}

/// Where a tensor's bytes are: absolute offsets in its shard's map.
struct Entry {
    shard: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// `model.safetensors.index.json`: which shard holds each tensor.
#[derive(Deserialize)]
struct ShardIndex {
    weight_map: BTreeMap<String, String>,
}

/// A Hugging Face checkpoint folder, memory-mapped, serving its tensors by GGUF name in GGUF layout.
pub struct SafetensorsFolder {
    dir: PathBuf,
    hf_config: HfLlamaConfig,
    config: LlamaConfig,
    shards: Vec<Shard>,
    tensors: HashMap<String, Entry>,
}

impl SafetensorsFolder {
    /// Reads `config.json`, maps the weights (`model.safetensors`, else the shards of
    /// `model.safetensors.index.json`) and checks that every tensor the model needs is present
    /// with the shape the config implies and a supported dtype.
    ///
    /// # Errors
    /// When a file is missing or malformed, a tensor is missing, has the wrong shape or an
    /// unsupported dtype; the error names the folder or file.
    pub fn open(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            return Err(Error::model(dir, "not a folder"));
        }
        let config_path = dir.join(CONFIG_FILE);
        if !config_path.is_file() {
            return Err(Error::model(
                dir,
                format!("{CONFIG_FILE} is missing: not a Hugging Face checkpoint folder"),
            ));
        }
        let hf_config = HfLlamaConfig::read(&config_path)?;
        let config = hf_config.to_llama_config(&config_path)?;
        let (shards, tensors) = map_weights(dir)?;
        let folder = Self {
            dir: dir.to_path_buf(),
            hf_config,
            config,
            shards,
            tensors,
        };
        folder.check_tensors()?;
        Ok(folder)
    }

    /// The validated hyperparameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// `config.json` as read.
    pub fn hf_config(&self) -> &HfLlamaConfig {
        &self.hf_config
    }

    /// The safetensors files mapped, in order.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.shards.iter().map(|s| s.path.as_path())
    }

    /// Whether the output head is the embedding matrix.
    fn tied(&self) -> bool {
        self.hf_config.tie_word_embeddings
    }

    /// Checks presence, shape and dtype of every tensor the model reads, by Hugging Face name.
    fn check_tensors(&self) -> Result<()> {
        let c = &self.config;
        let (d, kv, f, v) = (c.dim, c.kv_dim(), c.ffn_dim, c.vocab_size);
        let mut wanted: Vec<(String, Vec<usize>, bool)> = vec![
            ("token_embd.weight".into(), vec![v, d], true),
            ("output_norm.weight".into(), vec![d], true),
        ];
        if !self.tied() {
            wanted.push(("output.weight".into(), vec![v, d], true));
        }
        for i in 0..c.n_layers {
            let shapes: [(&str, Vec<usize>, bool); 12] = [
                ("attn_norm.weight", vec![d], true),
                ("attn_q.weight", vec![d, d], true),
                ("attn_k.weight", vec![kv, d], true),
                ("attn_v.weight", vec![kv, d], true),
                ("attn_output.weight", vec![d, d], true),
                ("attn_q.bias", vec![d], false),
                ("attn_k.bias", vec![kv], false),
                ("attn_v.bias", vec![kv], false),
                ("ffn_norm.weight", vec![d], true),
                ("ffn_gate.weight", vec![f, d], true),
                ("ffn_up.weight", vec![f, d], true),
                ("ffn_down.weight", vec![d, f], true),
            ];
            wanted.extend(
                shapes
                    .into_iter()
                    .map(|(n, s, r)| (format!("blk.{i}.{n}"), s, r)),
            );
        }
        for (gguf, shape, required) in wanted {
            let hf = hf_tensor_name(&gguf).unwrap_or_default();
            let Some(entry) = self.tensors.get(&hf) else {
                if !required {
                    continue;
                }
                let why = if gguf == "output.weight" {
                    format!("{CONFIG_FILE} says tie_word_embeddings is false")
                } else {
                    format!("the model needs it as {gguf}")
                };
                return Err(Error::model(
                    &self.dir,
                    format!("tensor {hf} is missing ({why})"),
                ));
            };
            let path = &self.shards[entry.shard].path;
            if ggml_type(entry.dtype).is_none() {
                return Err(unsupported(path, &hf, entry.dtype));
            }
            if entry.shape != shape {
                return Err(Error::model(
                    path,
                    format!(
                        "tensor {hf} has shape {:?}, {CONFIG_FILE} implies {shape:?}",
                        entry.shape
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl TensorSource for SafetensorsFolder {
    fn origin(&self) -> &Path {
        &self.dir
    }

    fn tensor(&self, name: &str) -> Result<Option<RawTensor<'_>>> {
        if name == "output.weight" && self.tied() {
            return Ok(None);
        }
        let Some(hf) = hf_tensor_name(name) else {
            return Ok(None);
        };
        let Some(entry) = self.tensors.get(&hf) else {
            return Ok(None);
        };
        let shard = &self.shards[entry.shard];
        let kind =
            ggml_type(entry.dtype).ok_or_else(|| unsupported(&shard.path, &hf, entry.dtype))?;
        let bytes = shard
            .bytes
            .as_slice()
            .get(entry.start..entry.end)
            .ok_or_else(|| {
                Error::format(&shard.path, format!("tensor {hf} lies outside the file"))
            })?;
        let elements = entry
            .shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d));
        let needed = elements.and_then(|n| n.checked_mul(kind.block_bytes()));
        if needed != Some(bytes.len()) {
            return Err(Error::format(
                &shard.path,
                format!(
                    "tensor {hf}: shape {:?} of {:?} needs {} bytes, the file holds {}",
                    entry.shape,
                    entry.dtype,
                    needed.map_or_else(|| "too many".to_string(), |n| n.to_string()),
                    bytes.len()
                ),
            ));
        }
        let dims = entry.shape.iter().rev().map(|&d| d as u64).collect();
        let data = match qk_permutation_heads(&self.config, name) {
            Some(heads) => {
                let row_bytes = entry.shape.get(1).copied().unwrap_or(1) * kind.block_bytes();
                let permuted = permute_qk_rows(bytes, row_bytes, heads, QkLayout::ToInterleaved).ok_or_else(|| {
                    Error::model(
                        &shard.path,
                        format!("tensor {hf}: shape {:?} does not split into {heads} heads of even size", entry.shape),
                    )
                })?;
                Cow::Owned(permuted)
            }
            None => Cow::Borrowed(bytes),
        };
        Ok(Some(RawTensor { dims, kind, data }))
    }
}

fn unsupported(path: &Path, tensor: &str, dtype: Dtype) -> Error {
    Error::UnsupportedType {
        path: path.to_path_buf(),
        tensor: tensor.to_string(),
        kind: format!("{dtype:?} (supported: F32, F16, BF16)"),
    }
}

/// Maps the folder's weights: `model.safetensors` when present (as `transformers` prefers it),
/// else every shard named in `model.safetensors.index.json`.
fn map_weights(dir: &Path) -> Result<(Vec<Shard>, HashMap<String, Entry>)> {
    let single = dir.join(WEIGHTS_FILE);
    if single.is_file() {
        let (shard, tensors) = map_shard(single, 0)?;
        return Ok((vec![shard], tensors));
    }
    let index_path = dir.join(INDEX_FILE);
    if !index_path.is_file() {
        return Err(Error::model(
            dir,
            format!("neither {WEIGHTS_FILE} nor {INDEX_FILE} is there"),
        ));
    }
    let bad_index = |problem: String| Error::format(&index_path, format!("bad index: {problem}"));
    let text = std::fs::read_to_string(&index_path).map_err(|source| Error::Io {
        path: index_path.clone(),
        source,
    })?;
    let index: ShardIndex = serde_json::from_str(&text).map_err(|e| bad_index(e.to_string()))?;
    if index.weight_map.is_empty() {
        return Err(bad_index("weight_map lists no tensors".into()));
    }
    let files: BTreeSet<&str> = index.weight_map.values().map(String::as_str).collect();
    let mut shards = Vec::with_capacity(files.len());
    let mut by_file = HashMap::with_capacity(files.len());
    for file in files {
        // Shard names are plain file names in the folder: no separators, no `..`.
        if Path::new(file).file_name().and_then(|n| n.to_str()) != Some(file) {
            return Err(bad_index(format!(
                "shard {file:?} is not a file name in the folder"
            )));
        }
        let path = dir.join(file);
        if !path.is_file() {
            return Err(bad_index(format!("shard {file} is missing")));
        }
        let (shard, entries) = map_shard(path, shards.len())?;
        by_file.insert(file, entries);
        shards.push(shard);
    }
    let mut tensors = HashMap::with_capacity(index.weight_map.len());
    for (name, file) in &index.weight_map {
        let entry = by_file
            .get_mut(file.as_str())
            .and_then(|entries| entries.remove(name))
            .ok_or_else(|| {
                bad_index(format!(
                    "tensor {name} is listed in {file}, which does not hold it"
                ))
            })?;
        tensors.insert(name.clone(), entry);
    }
    Ok((shards, tensors))
}

/// Maps one `.safetensors` file, the folder's `shard`-th, and reads its header.
fn map_shard(path: PathBuf, shard: usize) -> Result<(Shard, HashMap<String, Entry>)> {
    let bytes = FileBytes::map(&path)?;
    let (header_len, metadata) = SafeTensors::read_metadata(bytes.as_slice())
        .map_err(|e| Error::format(&path, format!("not a valid safetensors file: {e}")))?;
    let data_start = 8 + header_len;
    let file_len = bytes.as_slice().len();
    let mut entries = HashMap::new();
    for (name, info) in metadata.tensors() {
        let (begin, end) = info.data_offsets;
        let (start, end) = match (data_start.checked_add(begin), data_start.checked_add(end)) {
            (Some(start), Some(end)) if start <= end && end <= file_len => (start, end),
            _ => {
                return Err(Error::format(
                    &path,
                    format!(
                        "tensor {name}: data offsets {begin}..{end} lie outside the file of {file_len} bytes"
                    ),
                ));
            }
        };
        let entry = Entry {
            shard,
            dtype: info.dtype,
            shape: info.shape.clone(),
            start,
            end,
        };
        entries.insert(name, entry);
    }
    Ok((Shard { path, bytes }, entries))
}

#[cfg(test)]
mod tests;
