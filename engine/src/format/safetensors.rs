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
    loader::{LoadedModel, ModelFormat},
    model::{Activation, Llama, LlamaConfig, LoadOptions, RopeStyle},
    quant::GgmlType,
    tokenizer::Tokenizer,
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

/// Loads a Hugging Face checkpoint folder: weights through [`SafetensorsFolder`], tokenizer from
/// `tokenizer.json` and `tokenizer_config.json`.
///
/// # Errors
/// When a file is missing or malformed, or the tensors do not match `config.json`.
pub fn load_folder(path: &Path, options: LoadOptions) -> Result<LoadedModel> {
    let folder = SafetensorsFolder::open(path)?;
    let tokenizer_json = path.join(TOKENIZER_FILE);
    if !tokenizer_json.is_file() {
        return Err(Error::model(path, format!("{TOKENIZER_FILE} is missing")));
    }
    let tokenizer =
        Tokenizer::from_hf_files(&tokenizer_json, Some(&path.join(TOKENIZER_CONFIG_FILE)))?;
    let model = Llama::load(folder.config().clone(), &folder, options)?;
    Ok(LoadedModel {
        model,
        tokenizer,
        format: ModelFormat::HuggingFace,
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng, rngs::StdRng};
    use safetensors::tensor::TensorView;
    use serde_json::json;

    use super::*;
    use crate::{
        format::convert::{
            ConvertOptions, HfDtype, gguf_to_hf,
            test_model::{DIM, FFN, TinySpec, tiny_gguf},
        },
        format::gguf::GgufFile,
        model::Logits,
        weights::WeightType,
    };

    /// A tiny model converted to a Hugging Face folder (`tmp/hf`).
    fn hf_folder(spec: TinySpec, dtype: HfDtype) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let gguf = GgufFile::from_bytes(Path::new("tiny.gguf"), tiny_gguf(spec))
            .expect("tiny GGUF parses");
        let dir = tmp.path().join("hf");
        gguf_to_hf(
            &gguf,
            &dir,
            ConvertOptions {
                dtype,
                force: false,
            },
        )
        .expect("converts");
        (tmp, dir)
    }

    fn llama() -> TinySpec {
        TinySpec {
            arch: "llama",
            tied: false,
            bias: false,
            seed: 11,
        }
    }

    /// An owned tensor for rewriting safetensors files.
    type Owned = (String, Dtype, Vec<usize>, Vec<u8>);

    fn read_tensors(path: &Path) -> Vec<Owned> {
        let bytes = std::fs::read(path).expect("read weights");
        let st = SafeTensors::deserialize(&bytes).expect("valid safetensors");
        let mut tensors: Vec<Owned> = st
            .iter()
            .map(|(n, t)| {
                (
                    n.to_string(),
                    t.dtype(),
                    t.shape().to_vec(),
                    t.data().to_vec(),
                )
            })
            .collect();
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        tensors
    }

    fn write_tensors(path: &Path, tensors: &[Owned]) {
        let views: Vec<(&str, TensorView<'_>)> = tensors
            .iter()
            .map(|(n, d, s, b)| {
                (
                    n.as_str(),
                    TensorView::new(*d, s.clone(), b).expect("consistent view"),
                )
            })
            .collect();
        let bytes = safetensors::serialize(views, None).expect("serializes");
        std::fs::write(path, bytes).expect("write weights");
    }

    /// Rewrites `model.safetensors` through `edit` (`None` drops the tensor).
    fn rewrite(dir: &Path, edit: impl Fn(Owned) -> Option<Owned>) {
        let path = dir.join(WEIGHTS_FILE);
        let tensors: Vec<Owned> = read_tensors(&path).into_iter().filter_map(edit).collect();
        write_tensors(&path, &tensors);
    }

    fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
        let path = dir.join(CONFIG_FILE);
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
        edit(&mut config);
        std::fs::write(&path, config.to_string()).expect("write");
    }

    fn open_err(dir: &Path) -> String {
        match SafetensorsFolder::open(dir) {
            Ok(_) => panic!("{} opened", dir.display()),
            Err(e) => e.to_string(),
        }
    }

    /// Splits `model.safetensors` into two shards and an index.
    fn shard(dir: &Path) -> BTreeMap<String, String> {
        let tensors = read_tensors(&dir.join(WEIGHTS_FILE));
        let names = [
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
        ];
        let (a, b): (Vec<_>, Vec<_>) = tensors
            .into_iter()
            .enumerate()
            .partition(|(i, _)| i % 2 == 0);
        let mut weight_map = BTreeMap::new();
        for (file, part) in names.iter().zip([a, b]) {
            let part: Vec<Owned> = part.into_iter().map(|(_, t)| t).collect();
            weight_map.extend(part.iter().map(|t| (t.0.clone(), file.to_string())));
            write_tensors(&dir.join(file), &part);
        }
        std::fs::remove_file(dir.join(WEIGHTS_FILE)).expect("remove the single file");
        write_index(dir, &weight_map);
        weight_map
    }

    fn write_index(dir: &Path, weight_map: &BTreeMap<String, String>) {
        let index = json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
        std::fs::write(dir.join(INDEX_FILE), index.to_string()).expect("write index");
    }

    /// Neox (halves) or interleaved (adjacent pairs) RoPE of each head of `x` at `pos`.
    fn rope(x: &mut [f32], head_dim: usize, pos: usize, interleaved: bool) {
        let half = head_dim / 2;
        for head in x.chunks_exact_mut(head_dim) {
            for i in 0..half {
                let theta = pos as f32 * 10_000f32.powf(-2.0 * i as f32 / head_dim as f32);
                let (a, b) = if interleaved {
                    (2 * i, 2 * i + 1)
                } else {
                    (i, i + half)
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * theta.cos() - x1 * theta.sin();
                head[b] = x0 * theta.sin() + x1 * theta.cos();
            }
        }
    }

    #[test]
    fn permutation_and_its_inverse_round_trip() {
        let mut rng = StdRng::seed_from_u64(7);
        for (n_head, head_dim, row_len) in [(1, 2, 1), (4, 16, 8), (3, 64, 5), (9, 8, 1), (2, 6, 3)]
        {
            let values: Vec<f32> = (0..n_head * head_dim * row_len)
                .map(|_| rng.random())
                .collect();
            let there =
                permute_qk_rows(&values, row_len, n_head, QkLayout::ToInterleaved).expect("splits");
            let back =
                permute_qk_rows(&there, row_len, n_head, QkLayout::ToHalves).expect("splits");
            assert_eq!(
                back, values,
                "{n_head} heads of {head_dim}, rows of {row_len}"
            );
            let other_way =
                permute_qk_rows(&values, row_len, n_head, QkLayout::ToHalves).expect("splits");
            let back = permute_qk_rows(&other_way, row_len, n_head, QkLayout::ToInterleaved)
                .expect("splits");
            assert_eq!(back, values);
            if head_dim > 2 {
                assert_ne!(there, values, "the permutation moves rows");
            }
        }
        assert!(
            permute_qk_rows(&[0u8; 12], 1, 4, QkLayout::ToInterleaved).is_none(),
            "odd head size"
        );
        assert!(
            permute_qk_rows(&[0u8; 12], 5, 1, QkLayout::ToInterleaved).is_none(),
            "ragged rows"
        );
    }

    #[test]
    fn permutation_is_llama_cpp_reshape_swapaxes() {
        // reshape(n_head, 2, head_dim / 2, cols).swapaxes(1, 2).reshape(rows, cols), written out.
        let (n_head, head_dim, cols) = (3, 8, 2);
        let half = head_dim / 2;
        let values: Vec<u32> = (0..(n_head * head_dim * cols) as u32).collect();
        let mut want = Vec::new();
        for h in 0..n_head {
            for j in 0..half {
                for s in 0..2 {
                    let row = h * head_dim + s * half + j;
                    want.extend_from_slice(&values[row * cols..(row + 1) * cols]);
                }
            }
        }
        assert_eq!(
            permute_qk_rows(&values, cols, n_head, QkLayout::ToInterleaved),
            Some(want)
        );
    }

    #[test]
    fn interleaved_rope_of_permuted_rows_is_neox_rope_of_the_original() {
        let mut rng = StdRng::seed_from_u64(8);
        let (n_head, head_dim) = (3, 16);
        let q: Vec<f32> = (0..n_head * head_dim)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let mut neox = q.clone();
        rope(&mut neox, head_dim, 5, false);
        let mut interleaved =
            permute_qk_rows(&q, 1, n_head, QkLayout::ToInterleaved).expect("splits");
        rope(&mut interleaved, head_dim, 5, true);
        let neox_permuted =
            permute_qk_rows(&neox, 1, n_head, QkLayout::ToInterleaved).expect("splits");
        for (a, b) in interleaved.iter().zip(&neox_permuted) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }

    #[test]
    fn gguf_names_map_to_hugging_face_names() {
        let cases = [
            ("token_embd.weight", Some("model.embed_tokens.weight")),
            ("output.weight", Some("lm_head.weight")),
            ("output_norm.weight", Some("model.norm.weight")),
            (
                "blk.0.attn_q.weight",
                Some("model.layers.0.self_attn.q_proj.weight"),
            ),
            (
                "blk.12.attn_k.bias",
                Some("model.layers.12.self_attn.k_proj.bias"),
            ),
            (
                "blk.3.attn_output.weight",
                Some("model.layers.3.self_attn.o_proj.weight"),
            ),
            (
                "blk.3.attn_norm.weight",
                Some("model.layers.3.input_layernorm.weight"),
            ),
            (
                "blk.3.ffn_norm.weight",
                Some("model.layers.3.post_attention_layernorm.weight"),
            ),
            (
                "blk.3.ffn_down.weight",
                Some("model.layers.3.mlp.down_proj.weight"),
            ),
            ("blk.3.ffn_norm.bias", None),
            ("blk.x.attn_q.weight", None),
            ("rope_freqs.weight", None),
        ];
        for (gguf, hf) in cases {
            assert_eq!(hf_tensor_name(gguf).as_deref(), hf, "{gguf}");
        }
    }

    #[test]
    fn tensors_are_borrowed_except_llama_q_and_k() {
        let (_tmp, dir) = hf_folder(llama(), HfDtype::F16);
        let folder = SafetensorsFolder::open(&dir).expect("opens");
        assert_eq!(folder.config().rope_style, RopeStyle::Interleaved);
        let v = folder
            .tensor("blk.0.attn_v.weight")
            .expect("reads")
            .expect("present");
        assert!(matches!(v.data, Cow::Borrowed(_)));
        assert_eq!(
            (v.kind, v.dims.as_slice()),
            (GgmlType::F16, &[DIM as u64, 32][..])
        );
        let q = folder
            .tensor("blk.0.attn_q.weight")
            .expect("reads")
            .expect("present");
        assert!(matches!(q.data, Cow::Owned(_)));
        let down = folder
            .tensor("blk.1.ffn_down.weight")
            .expect("reads")
            .expect("present");
        assert_eq!(down.dims, [FFN as u64, DIM as u64]);
        assert!(folder.tensor("blk.0.attn_q.bias").expect("reads").is_none());
        assert!(folder.tensor("rope_freqs.weight").expect("reads").is_none());

        let qwen = TinySpec {
            arch: "qwen2",
            tied: true,
            bias: true,
            seed: 12,
        };
        let (_tmp, dir) = hf_folder(qwen, HfDtype::Bf16);
        let folder = SafetensorsFolder::open(&dir).expect("opens");
        assert_eq!(folder.config().rope_style, RopeStyle::Neox);
        let q = folder
            .tensor("blk.0.attn_q.weight")
            .expect("reads")
            .expect("present");
        assert!(
            matches!(q.data, Cow::Borrowed(_)),
            "qwen2 rows are not permuted"
        );
        assert_eq!(q.kind, GgmlType::BF16);
        assert!(
            folder.tensor("output.weight").expect("reads").is_none(),
            "tied"
        );
    }

    #[test]
    fn sharded_folder_gives_the_same_logits() {
        let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
        let options = LoadOptions {
            weights: Some(WeightType::F32),
            threads: 1,
            placement: Default::default(),
        };
        let tokens = [1, 2, 3, 100, 200, 256];
        let run = |dir: &Path| {
            let loaded = load_folder(dir, options).expect("loads");
            let mut cache = loaded.model.new_cache(tokens.len());
            loaded
                .model
                .forward(&tokens, &mut cache, Logits::All)
                .expect("forward")
        };
        let single = run(&dir);
        shard(&dir);
        assert_eq!(
            SafetensorsFolder::open(&dir)
                .expect("opens")
                .files()
                .count(),
            2
        );
        assert_eq!(run(&dir), single);
    }

    #[test]
    fn bad_index_is_named() {
        let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
        let mut weight_map = shard(&dir);

        let [first, second] = [
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
        ];
        let holder = weight_map["model.embed_tokens.weight"].clone();
        let wrong = if holder == first { second } else { first };
        weight_map.insert("model.embed_tokens.weight".into(), wrong.into());
        write_index(&dir, &weight_map);
        let err = open_err(&dir);
        let want = format!(
            "{INDEX_FILE}: bad index: tensor model.embed_tokens.weight is listed in {wrong}, which does not hold it"
        );
        assert!(err.contains(&want), "{err}");

        weight_map.insert(
            "model.embed_tokens.weight".into(),
            "model-00003-of-00002.safetensors".into(),
        );
        write_index(&dir, &weight_map);
        let err = open_err(&dir);
        assert!(
            err.contains("shard model-00003-of-00002.safetensors is missing"),
            "{err}"
        );

        weight_map.insert(
            "model.embed_tokens.weight".into(),
            "../model.safetensors".into(),
        );
        write_index(&dir, &weight_map);
        let err = open_err(&dir);
        assert!(err.contains("is not a file name in the folder"), "{err}");

        std::fs::write(dir.join(INDEX_FILE), "{\"weight_map\": 3}").expect("write");
        let err = open_err(&dir);
        assert!(err.contains("bad index"), "{err}");

        std::fs::remove_file(dir.join(INDEX_FILE)).expect("remove");
        let err = open_err(&dir);
        assert!(
            err.contains("neither model.safetensors nor model.safetensors.index.json"),
            "{err}"
        );
    }

    #[test]
    fn missing_tensor_is_named() {
        let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
        rewrite(&dir, |t| {
            (t.0 != "model.layers.1.mlp.up_proj.weight").then_some(t)
        });
        let err = open_err(&dir);
        assert!(err.contains("tensor model.layers.1.mlp.up_proj.weight is missing (the model needs it as blk.1.ffn_up.weight)"), "{err}");
        assert!(err.starts_with(&dir.display().to_string()), "{err}");

        let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
        rewrite(&dir, |t| (t.0 != "lm_head.weight").then_some(t));
        let err = open_err(&dir);
        assert!(
            err.contains(
                "lm_head.weight is missing (config.json says tie_word_embeddings is false)"
            ),
            "{err}"
        );
    }

    #[test]
    fn bad_shape_is_named() {
        let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
        rewrite(&dir, |(name, dtype, shape, bytes)| {
            if name == "model.layers.0.self_attn.k_proj.weight" {
                // Same bytes, rows and columns swapped: [64, 32] instead of [32, 64].
                Some((name, dtype, vec![shape[1], shape[0]], bytes))
            } else {
                Some((name, dtype, shape, bytes))
            }
        });
        let err = open_err(&dir);
        assert!(err.contains("model.safetensors: tensor model.layers.0.self_attn.k_proj.weight has shape [64, 32], config.json implies [32, 64]"), "{err}");
    }

    #[test]
    fn unsupported_dtype_is_named() {
        let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
        rewrite(&dir, |(name, dtype, shape, bytes)| {
            let dtype = if name == "model.norm.weight" {
                Dtype::I32
            } else {
                dtype
            };
            Some((name, dtype, shape, bytes))
        });
        let err = SafetensorsFolder::open(&dir).err().expect("refused");
        assert!(matches!(err, Error::UnsupportedType { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("tensor model.norm.weight has unsupported type I32"),
            "{text}"
        );
    }

    #[test]
    fn truncated_weights_are_refused() {
        let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
        let path = dir.join(WEIGHTS_FILE);
        let bytes = std::fs::read(&path).expect("read");
        std::fs::write(&path, &bytes[..bytes.len() - 10]).expect("write");
        let err = open_err(&dir);
        assert!(
            err.contains("model.safetensors: not a valid safetensors file"),
            "{err}"
        );
    }

    #[test]
    fn config_problems_are_named() {
        let (tmp, dir) = hf_folder(llama(), HfDtype::F32);
        let err = open_err(tmp.path());
        assert!(err.contains("config.json is missing"), "{err}");

        edit_config(&dir, |c| {
            c.as_object_mut().expect("object").remove("hidden_size");
        });
        let err = open_err(&dir);
        assert!(
            err.contains("config.json: invalid config: missing field `hidden_size`"),
            "{err}"
        );

        let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
        edit_config(&dir, |c| {
            c["model_type"] = "gpt2".into();
            c["architectures"] = json!(["GPT2LMHeadModel"]);
        });
        assert!(open_err(&dir).contains("is not supported (supported: llama, qwen2)"));

        let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
        edit_config(&dir, |c| {
            c["rope_scaling"] = json!({"rope_type": "llama3", "factor": 8.0})
        });
        assert!(open_err(&dir).contains("rope_scaling of type \"llama3\" is not supported"));

        let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
        edit_config(&dir, |c| c["num_key_value_heads"] = 3.into());
        assert!(open_err(&dir).contains("4 heads are not a multiple of 3 kv heads"));

        let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
        edit_config(&dir, |c| c["head_dim"] = 32.into());
        // A head size of its own (as Gemma's) is taken, so the projections' shapes must follow it.
        let err = open_err(&dir);
        assert!(
            err.contains("self_attn.") && err.contains("config.json implies"),
            "{err}"
        );
    }

    #[test]
    fn config_without_optional_keys_uses_transformers_defaults() {
        let text = r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 260, "rope_scaling": null}"#;
        let hf: HfLlamaConfig = serde_json::from_str(text).expect("parses");
        let config = hf.to_llama_config(Path::new("config.json")).expect("valid");
        assert_eq!(config.architecture, "llama");
        assert_eq!((config.n_kv_heads, config.head_dim), (4, 16));
        assert_eq!(
            (config.rope_theta, config.rms_eps, config.context_length),
            (10_000.0, 1e-6, 2048)
        );
    }

    #[test]
    fn missing_tokenizer_is_named() {
        let (_tmp, dir) = hf_folder(llama(), HfDtype::F32);
        std::fs::remove_file(dir.join(TOKENIZER_FILE)).expect("remove");
        let err = load_folder(&dir, LoadOptions::default())
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("tokenizer.json is missing"), "{err}");
    }
}
