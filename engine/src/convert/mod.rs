//! GGUF to Hugging Face conversion: `config.json`, `model.safetensors` (F32, F16 or BF16),
//! `tokenizer.json`, `tokenizer_config.json` and `generation_config.json` from one GGUF file.
//!
//! Quantized tensors are dequantized and Llama's Q/K rows go back to Hugging Face's half-split RoPE
//! layout. Tensors are converted one at a time as the file is written, so memory use beyond the
//! GGUF map is about one tensor.

use std::{
    borrow::Cow,
    collections::HashMap,
    fmt,
    path::{Path, PathBuf},
    str::FromStr,
};

use half::{bf16, f16};
use safetensors::{Dtype, View};
use serde_json::json;

use crate::{
    error::{Error, Result},
    format::{
        gguf::{GgufFile, TensorInfo},
        safetensors::{
            CONFIG_FILE, HfLlamaConfig, QkLayout, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE,
            WEIGHTS_FILE, hf_tensor_name, permute_qk_rows, qk_permutation_heads,
        },
    },
    model::LlamaConfig,
    quant,
    tokenizer::Tokenizer,
};

/// Default generation settings (BOS/EOS ids).
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";

/// The float type of the written weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HfDtype {
    /// 32-bit float: exact for every GGUF type.
    #[default]
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
}

impl HfDtype {
    /// The lowercase name (`f32`, `f16`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
        }
    }

    /// The name `config.json`'s `torch_dtype` uses.
    pub fn torch_name(self) -> &'static str {
        match self {
            Self::F32 => "float32",
            Self::F16 => "float16",
            Self::Bf16 => "bfloat16",
        }
    }

    fn safetensors_dtype(self) -> Dtype {
        match self {
            Self::F32 => Dtype::F32,
            Self::F16 => Dtype::F16,
            Self::Bf16 => Dtype::BF16,
        }
    }

    fn bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
        }
    }

    /// Little-endian bytes of `values` in this type (round to nearest even).
    fn encode(self, values: &[f32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(values.len() * self.bytes());
        match self {
            Self::F32 => values
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            Self::F16 => values
                .iter()
                .for_each(|&v| out.extend_from_slice(&f16::from_f32(v).to_le_bytes())),
            Self::Bf16 => values
                .iter()
                .for_each(|&v| out.extend_from_slice(&bf16::from_f32(v).to_le_bytes())),
        }
        out
    }
}

impl fmt::Display for HfDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HfDtype {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(Self::F32),
            "f16" | "float16" => Ok(Self::F16),
            "bf16" | "bfloat16" => Ok(Self::Bf16),
            _ => Err(format!("unknown dtype {s:?} (expected f32, f16 or bf16)")),
        }
    }
}

/// How [`gguf_to_hf`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConvertOptions {
    /// The float type of the weights.
    pub dtype: HfDtype,
    /// Write into a folder that already holds files, replacing those of the same names.
    pub force: bool,
}

/// What [`gguf_to_hf`] wrote.
#[derive(Debug, Clone)]
pub struct Converted {
    /// The files written, in order.
    pub files: Vec<PathBuf>,
    /// Tensors in `model.safetensors`.
    pub tensors: usize,
    /// The model's hyperparameters.
    pub config: LlamaConfig,
}

/// Writes `gguf` as a Hugging Face checkpoint folder at `out_dir` (created if needed).
///
/// # Errors
/// When `out_dir` holds files and `options.force` is off, the GGUF file does not describe a
/// supported model (or holds a tensor without a Hugging Face name), or a write fails.
pub fn gguf_to_hf(gguf: &GgufFile, out_dir: &Path, options: ConvertOptions) -> Result<Converted> {
    let config = LlamaConfig::from_gguf(gguf)?;
    if !CONVERTIBLE_ARCHITECTURES.contains(&config.architecture.as_str()) {
        return Err(Error::model(
            gguf.path(),
            format!(
                "converting architecture {:?} is not supported (supported: {})",
                config.architecture,
                CONVERTIBLE_ARCHITECTURES.join(", ")
            ),
        ));
    }
    let tokenizer = Tokenizer::from_gguf(gguf)?;
    let pending = plan_tensors(gguf, &config, options.dtype)?;
    prepare_dir(out_dir, options.force)?;

    let mut files = Vec::new();
    let weights_path = out_dir.join(WEIGHTS_FILE);
    let tensors = pending.len();
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(pending, Some(metadata), &weights_path).map_err(|e| {
        Error::Write {
            path: weights_path.clone(),
            problem: e.to_string(),
        }
    })?;
    files.push(weights_path);

    let tied = gguf.tensor("output.weight").is_none();
    let has_bias = gguf.tensor("blk.0.attn_q.bias").is_some();
    let hf_config = hf_config(&config, &tokenizer, tied, has_bias, options.dtype);
    files.push(write_json(out_dir, CONFIG_FILE, &hf_config)?);
    let tokenizer_json = tokenizer.to_json()?;
    files.push(write_file(
        out_dir,
        TOKENIZER_FILE,
        tokenizer_json.as_bytes(),
    )?);
    files.push(write_json(
        out_dir,
        TOKENIZER_CONFIG_FILE,
        &tokenizer_config(&tokenizer, &config),
    )?);
    let mut generation = serde_json::Map::new();
    if let Some(bos) = tokenizer.bos() {
        generation.insert("bos_token_id".into(), bos.into());
    }
    if let Some(eos) = tokenizer.eos() {
        generation.insert("eos_token_id".into(), eos.into());
    }
    files.push(write_json(out_dir, GENERATION_CONFIG_FILE, &generation)?);
    Ok(Converted {
        files,
        tensors,
        config,
    })
}

/// One tensor to write, converted from the GGUF map when the writer asks for its bytes.
struct PendingTensor<'a> {
    info: &'a TensorInfo,
    bytes: &'a [u8],
    /// Hugging Face order: `[rows, cols]`.
    shape: Vec<usize>,
    elements: usize,
    dtype: HfDtype,
    /// Query or key/value heads when the rows go back to the half-split RoPE layout.
    unpermute_heads: Option<usize>,
}

impl View for PendingTensor<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype.safetensors_dtype()
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        if self.info.kind == quant::GgmlType::F32
            && self.dtype == HfDtype::F32
            && self.unpermute_heads.is_none()
        {
            return Cow::Borrowed(self.bytes);
        }
        let mut values = vec![0f32; self.elements];
        quant::dequantize_bytes(self.info.kind, self.bytes, &mut values);
        if let Some(heads) = self.unpermute_heads {
            let row_len = self.shape.get(1).copied().unwrap_or(1);
            // The shape was checked to split into `heads` even heads when planning.
            if let Some(permuted) = permute_qk_rows(&values, row_len, heads, QkLayout::ToHalves) {
                values = permuted;
            }
        }
        Cow::Owned(self.dtype.encode(&values))
    }

    fn data_len(&self) -> usize {
        self.elements * self.dtype.bytes()
    }
}

/// The architectures whose Hugging Face form the converter writes.
const CONVERTIBLE_ARCHITECTURES: &[&str] = &["llama", "qwen2"];

/// Names, shapes and layouts of every tensor, checked before anything is written.
fn plan_tensors<'a>(
    gguf: &'a GgufFile,
    config: &LlamaConfig,
    dtype: HfDtype,
) -> Result<Vec<(String, PendingTensor<'a>)>> {
    let mut planned = Vec::with_capacity(gguf.tensors.len());
    for info in &gguf.tensors {
        let hf = hf_tensor_name(&info.name).ok_or_else(|| {
            Error::model(
                gguf.path(),
                format!(
                    "tensor {} has no Hugging Face counterpart; the converter cannot write it",
                    info.name
                ),
            )
        })?;
        let shape = info
            .dims
            .iter()
            .rev()
            .map(|&d| usize::try_from(d).ok())
            .collect::<Option<Vec<usize>>>();
        let elements = shape
            .as_ref()
            .and_then(|s| s.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)))
            .filter(|n| n.checked_mul(4).is_some());
        let (Some(shape), Some(elements)) = (shape, elements) else {
            return Err(Error::model(
                gguf.path(),
                format!(
                    "tensor {}: dimensions {:?} are too large",
                    info.name, info.dims
                ),
            ));
        };
        let unpermute_heads = qk_permutation_heads(config, &info.name);
        if let Some(heads) = unpermute_heads {
            let rows = shape.first().copied().unwrap_or(0);
            if !rows.is_multiple_of(heads) || !(rows / heads.max(1)).is_multiple_of(2) || rows == 0
            {
                return Err(Error::model(
                    gguf.path(),
                    format!(
                        "tensor {}: {rows} rows do not split into {heads} heads of even size",
                        info.name
                    ),
                ));
            }
        }
        planned.push((
            hf,
            PendingTensor {
                info,
                bytes: gguf.tensor_data(info),
                shape,
                elements,
                dtype,
                unpermute_heads,
            },
        ));
    }
    Ok(planned)
}

/// Creates `dir`, or checks that it may be written into.
fn prepare_dir(dir: &Path, force: bool) -> Result<()> {
    let write_err = |problem: String| Error::Write {
        path: dir.to_path_buf(),
        problem,
    };
    if dir.exists() {
        if !dir.is_dir() {
            return Err(write_err("exists and is not a folder".into()));
        }
        let mut entries = std::fs::read_dir(dir).map_err(|e| write_err(e.to_string()))?;
        if entries.next().is_some() && !force {
            return Err(write_err(
                "the folder is not empty; refusing to overwrite it without force".into(),
            ));
        }
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| write_err(format!("cannot create the folder: {e}")))
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, bytes).map_err(|e| Error::Write {
        path: path.clone(),
        problem: e.to_string(),
    })?;
    Ok(path)
}

fn write_json(dir: &Path, name: &str, value: &impl serde::Serialize) -> Result<PathBuf> {
    let mut text = serde_json::to_string_pretty(value).map_err(|e| Error::Write {
        path: dir.join(name),
        problem: e.to_string(),
    })?;
    text.push('\n');
    write_file(dir, name, text.as_bytes())
}

/// An f32 as the shortest decimal that reads back as the same f32 (`1e-5`, not `9.99999974e-6`).
fn short_f64(value: f32) -> f64 {
    value.to_string().parse().unwrap_or(value.into())
}

fn hf_config(
    config: &LlamaConfig,
    tokenizer: &Tokenizer,
    tied: bool,
    has_bias: bool,
    dtype: HfDtype,
) -> HfLlamaConfig {
    let qwen2 = config.architecture == "qwen2";
    HfLlamaConfig {
        architectures: vec![
            if qwen2 {
                "Qwen2ForCausalLM"
            } else {
                "LlamaForCausalLM"
            }
            .to_string(),
        ],
        model_type: Some(config.architecture.clone()),
        hidden_size: config.dim,
        num_hidden_layers: config.n_layers,
        num_attention_heads: config.n_heads,
        num_key_value_heads: Some(config.n_kv_heads),
        head_dim: Some(config.head_dim),
        intermediate_size: config.ffn_dim,
        vocab_size: config.vocab_size,
        rope_theta: short_f64(config.rope_theta),
        rms_norm_eps: short_f64(config.rms_eps),
        max_position_embeddings: config.context_length,
        tie_word_embeddings: tied,
        hidden_act: Some("silu".into()),
        rope_scaling: None,
        attention_bias: (!qwen2).then_some(has_bias),
        bos_token_id: tokenizer.bos().map(Into::into),
        eos_token_id: tokenizer.eos().map(Into::into),
        torch_dtype: Some(dtype.torch_name().into()),
    }
}

fn tokenizer_config(tokenizer: &Tokenizer, config: &LlamaConfig) -> serde_json::Value {
    let mut out = json!({
        "add_bos_token": tokenizer.adds_bos(),
        "add_eos_token": false,
        "clean_up_tokenization_spaces": false,
        "model_max_length": config.context_length,
        "tokenizer_class": "PreTrainedTokenizerFast",
    });
    let text = |id: Option<u32>| id.and_then(|id| tokenizer.token_text(id));
    if let Some(bos) = text(tokenizer.bos()) {
        out["bos_token"] = bos.into();
    }
    if let Some(eos) = text(tokenizer.eos()) {
        out["eos_token"] = eos.into();
    }
    if let Some(template) = tokenizer.chat_template() {
        out["chat_template"] = template.into();
    }
    out
}

#[cfg(test)]
pub(crate) mod test_model;

#[cfg(test)]
mod tests;
