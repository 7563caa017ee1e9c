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

/// A tiny random Llama/Qwen2 GGUF file built in memory, for this module's and the safetensors
/// reader's tests.
#[cfg(test)]
pub(crate) mod test_model {
    use rand::{Rng, SeedableRng, rngs::StdRng};

    use crate::{format::gguf::MetaValue, quant, quant::GgmlType};

    /// Shape and options of a tiny model.
    #[derive(Clone, Copy)]
    pub(crate) struct TinySpec {
        pub(crate) arch: &'static str,
        /// No `output.weight`: the embedding is the head.
        pub(crate) tied: bool,
        /// Q/K/V biases.
        pub(crate) bias: bool,
        pub(crate) seed: u64,
    }

    pub(crate) const DIM: usize = 64;
    pub(crate) const HEADS: usize = 4;
    pub(crate) const KV_HEADS: usize = 2;
    pub(crate) const FFN: usize = 96;
    pub(crate) const LAYERS: usize = 2;
    const KV_DIM: usize = DIM / HEADS * KV_HEADS;

    /// GPT-2's printable stand-in for each byte, in byte order.
    fn byte_alphabet() -> Vec<String> {
        let mut extra = 0u32;
        (0u32..256)
            .map(|b| {
                let printable =
                    (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
                let code = if printable {
                    b
                } else {
                    extra += 1;
                    255 + extra
                };
                char::from_u32(code).expect("a valid char").to_string()
            })
            .collect()
    }

    /// Vocabulary: the 256 byte tokens, two merges, two control tokens (BOS, EOS).
    pub(crate) fn vocab() -> Vec<String> {
        let mut tokens = byte_alphabet();
        tokens.extend(["he", "Ġt", "<|im_start|>", "<|im_end|>"].map(String::from));
        tokens
    }

    struct Tensor {
        name: String,
        dims: Vec<u64>,
        kind: GgmlType,
        data: Vec<u8>,
    }

    /// GGUF v3 bytes: header, metadata, tensor table, 32-byte aligned data.
    fn gguf_bytes(metadata: &[(&str, MetaValue)], tensors: &[Tensor]) -> Vec<u8> {
        fn string(out: &mut Vec<u8>, s: &str) {
            out.extend((s.len() as u64).to_le_bytes());
            out.extend(s.as_bytes());
        }
        fn type_id(value: &MetaValue) -> u32 {
            match value {
                MetaValue::U32(_) => 4,
                MetaValue::I32(_) => 5,
                MetaValue::F32(_) => 6,
                MetaValue::Bool(_) => 7,
                MetaValue::String(_) => 8,
                MetaValue::Array(_) => 9,
                other => panic!("the test writer does not write {other:?}"),
            }
        }
        fn value(out: &mut Vec<u8>, v: &MetaValue) {
            match v {
                MetaValue::U32(v) => out.extend(v.to_le_bytes()),
                MetaValue::I32(v) => out.extend(v.to_le_bytes()),
                MetaValue::F32(v) => out.extend(v.to_le_bytes()),
                MetaValue::Bool(v) => out.push(u8::from(*v)),
                MetaValue::String(s) => string(out, s),
                MetaValue::Array(items) => {
                    out.extend(items.first().map_or(8, type_id).to_le_bytes());
                    out.extend((items.len() as u64).to_le_bytes());
                    items.iter().for_each(|item| value(out, item));
                }
                other => panic!("the test writer does not write {other:?}"),
            }
        }
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((tensors.len() as u64).to_le_bytes());
        out.extend((metadata.len() as u64).to_le_bytes());
        for (key, v) in metadata {
            string(&mut out, key);
            out.extend(type_id(v).to_le_bytes());
            value(&mut out, v);
        }
        let mut offset = 0u64;
        for t in tensors {
            string(&mut out, &t.name);
            out.extend((t.dims.len() as u32).to_le_bytes());
            t.dims.iter().for_each(|d| out.extend(d.to_le_bytes()));
            out.extend(t.kind.id().to_le_bytes());
            out.extend(offset.to_le_bytes());
            offset += (t.data.len() as u64).next_multiple_of(32);
        }
        for t in tensors {
            out.resize(out.len().next_multiple_of(32), 0);
            out.extend(&t.data);
        }
        out
    }

    fn encode(kind: GgmlType, values: &[f32]) -> Vec<u8> {
        match kind {
            GgmlType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            GgmlType::F16 => values
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                .collect(),
            GgmlType::BF16 => values
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect(),
            GgmlType::Q8_0 => {
                let mut blocks = vec![quant::BlockQ8_0::default(); values.len() / quant::QK];
                quant::quantize_q8_0(values, &mut blocks);
                quant::q8_0_bytes(&blocks)
            }
            other => panic!("the test writer does not encode {other}"),
        }
    }

    /// A tiny random model as GGUF bytes: a mix of F32, F16 and Q8_0 tensors.
    pub(crate) fn tiny_gguf(spec: TinySpec) -> Vec<u8> {
        let mut rng = StdRng::seed_from_u64(spec.seed);
        let tokens = vocab();
        let n_vocab = tokens.len();
        let mut tensors = Vec::new();
        let mut add =
            |name: String, rows: usize, cols: usize, kind: GgmlType, center: f32, spread: f32| {
                let values: Vec<f32> = (0..rows * cols)
                    .map(|_| center + rng.random_range(-spread..spread))
                    .collect();
                let dims = if rows == 1 {
                    vec![cols as u64]
                } else {
                    vec![cols as u64, rows as u64]
                };
                tensors.push(Tensor {
                    name,
                    dims,
                    kind,
                    data: encode(kind, &values),
                });
            };
        let w = 1.0 / (DIM as f32).sqrt();
        add(
            "token_embd.weight".into(),
            n_vocab,
            DIM,
            GgmlType::F16,
            0.0,
            1.0,
        );
        if !spec.tied {
            add("output.weight".into(), n_vocab, DIM, GgmlType::Q8_0, 0.0, w);
        }
        add("output_norm.weight".into(), 1, DIM, GgmlType::F32, 1.0, 0.2);
        for i in 0..LAYERS {
            let name = |s: &str| format!("blk.{i}.{s}");
            add(name("attn_norm.weight"), 1, DIM, GgmlType::F32, 1.0, 0.2);
            add(
                name("attn_q.weight"),
                DIM,
                DIM,
                GgmlType::Q8_0,
                0.0,
                2.0 * w,
            );
            add(
                name("attn_k.weight"),
                KV_DIM,
                DIM,
                GgmlType::F32,
                0.0,
                2.0 * w,
            );
            add(name("attn_v.weight"), KV_DIM, DIM, GgmlType::F16, 0.0, w);
            add(name("attn_output.weight"), DIM, DIM, GgmlType::Q8_0, 0.0, w);
            if spec.bias {
                add(name("attn_q.bias"), 1, DIM, GgmlType::F32, 0.0, 0.5);
                add(name("attn_k.bias"), 1, KV_DIM, GgmlType::F32, 0.0, 0.5);
                add(name("attn_v.bias"), 1, KV_DIM, GgmlType::F32, 0.0, 0.5);
            }
            add(name("ffn_norm.weight"), 1, DIM, GgmlType::F32, 1.0, 0.2);
            add(name("ffn_gate.weight"), FFN, DIM, GgmlType::Q8_0, 0.0, w);
            add(name("ffn_up.weight"), FFN, DIM, GgmlType::F32, 0.0, w);
            add(
                name("ffn_down.weight"),
                DIM,
                FFN,
                GgmlType::Q8_0,
                0.0,
                1.0 / (FFN as f32).sqrt(),
            );
        }
        let arch = spec.arch;
        let key = |k: &str| format!("{arch}.{k}");
        let strings = |items: Vec<String>| {
            MetaValue::Array(items.into_iter().map(MetaValue::String).collect())
        };
        let types = (0..n_vocab)
            .map(|i| MetaValue::I32(if i >= n_vocab - 2 { 3 } else { 1 }))
            .collect();
        let metadata: Vec<(String, MetaValue)> = vec![
            (
                "general.architecture".into(),
                MetaValue::String(arch.into()),
            ),
            (key("block_count"), MetaValue::U32(LAYERS as u32)),
            (key("context_length"), MetaValue::U32(128)),
            (key("embedding_length"), MetaValue::U32(DIM as u32)),
            (key("feed_forward_length"), MetaValue::U32(FFN as u32)),
            (key("attention.head_count"), MetaValue::U32(HEADS as u32)),
            (
                key("attention.head_count_kv"),
                MetaValue::U32(KV_HEADS as u32),
            ),
            (key("rope.freq_base"), MetaValue::F32(10_000.0)),
            (
                key("attention.layer_norm_rms_epsilon"),
                MetaValue::F32(1e-5),
            ),
            (
                "tokenizer.ggml.model".into(),
                MetaValue::String("gpt2".into()),
            ),
            (
                "tokenizer.ggml.pre".into(),
                MetaValue::String("smollm".into()),
            ),
            ("tokenizer.ggml.tokens".into(), strings(tokens)),
            (
                "tokenizer.ggml.merges".into(),
                strings(vec!["h e".into(), "Ġ t".into()]),
            ),
            ("tokenizer.ggml.token_type".into(), MetaValue::Array(types)),
            (
                "tokenizer.ggml.bos_token_id".into(),
                MetaValue::U32(n_vocab as u32 - 2),
            ),
            (
                "tokenizer.ggml.eos_token_id".into(),
                MetaValue::U32(n_vocab as u32 - 1),
            ),
            ("tokenizer.ggml.add_bos_token".into(), MetaValue::Bool(true)),
            (
                "tokenizer.chat_template".into(),
                MetaValue::String(
                    "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}"
                        .into(),
                ),
            ),
        ];
        let metadata: Vec<(&str, MetaValue)> = metadata
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        gguf_bytes(&metadata, &tensors)
    }
}

#[cfg(test)]
mod tests {
    use super::{test_model::*, *};
    use crate::{
        loader::{LoadedModel, ModelFormat},
        model::{LoadOptions, Logits},
        weights::WeightType,
    };

    const TEXT: &str = "<|im_start|>the tether held the theta";

    fn write_gguf(dir: &Path, spec: TinySpec) -> PathBuf {
        let path = dir.join("tiny.gguf");
        std::fs::write(&path, tiny_gguf(spec)).expect("write the tiny GGUF");
        path
    }

    fn logits(model: &LoadedModel, tokens: &[u32]) -> Vec<f32> {
        let mut cache = model.model.new_cache(tokens.len());
        model
            .model
            .forward(tokens, &mut cache, Logits::All)
            .expect("forward")
    }

    fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    fn f32_options() -> LoadOptions {
        LoadOptions {
            weights: Some(WeightType::F32),
            threads: 1,
            placement: Default::default(),
        }
    }

    /// Converts a tiny model to `dtype`, loads both, and returns (GGUF logits, HF logits).
    fn round_trip(spec: TinySpec, dtype: HfDtype, options: LoadOptions) -> (Vec<f32>, Vec<f32>) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let gguf_path = write_gguf(tmp.path(), spec);
        let out = tmp.path().join("hf");
        let gguf = GgufFile::open(&gguf_path).expect("tiny GGUF parses");
        let converted = gguf_to_hf(
            &gguf,
            &out,
            ConvertOptions {
                dtype,
                force: false,
            },
        )
        .expect("converts");
        assert_eq!(converted.tensors, gguf.tensors.len());
        assert!(converted.files.iter().all(|f| f.is_file()));

        let from_gguf = LoadedModel::open(&gguf_path, options).expect("GGUF loads");
        let from_hf = LoadedModel::open(&out, options).expect("HF folder loads");
        assert_eq!(from_hf.format, ModelFormat::HuggingFace);
        assert_eq!(from_hf.model.config(), from_gguf.model.config());
        let tokens = from_gguf.tokenizer.encode(TEXT).expect("encodes");
        assert_eq!(from_hf.tokenizer.encode(TEXT).expect("encodes"), tokens);
        assert_eq!(from_hf.tokenizer.bos(), from_gguf.tokenizer.bos());
        assert_eq!(from_hf.tokenizer.eos(), from_gguf.tokenizer.eos());
        assert_eq!(
            from_hf.tokenizer.chat_template(),
            from_gguf.tokenizer.chat_template()
        );
        (logits(&from_gguf, &tokens), logits(&from_hf, &tokens))
    }

    #[test]
    fn f32_llama_round_trip_gives_the_same_logits() {
        let spec = TinySpec {
            arch: "llama",
            tied: false,
            bias: false,
            seed: 1,
        };
        let (gguf, hf) = round_trip(spec, HfDtype::F32, f32_options());
        let diff = max_abs_diff(&gguf, &hf);
        assert!(diff < 1e-4, "max abs logit difference {diff}");
    }

    #[test]
    fn f32_tied_llama_with_biases_round_trips() {
        let spec = TinySpec {
            arch: "llama",
            tied: true,
            bias: true,
            seed: 2,
        };
        let (gguf, hf) = round_trip(spec, HfDtype::F32, f32_options());
        let diff = max_abs_diff(&gguf, &hf);
        assert!(diff < 1e-4, "max abs logit difference {diff}");
    }

    #[test]
    fn f32_qwen2_round_trip_keeps_neox_rows() {
        let spec = TinySpec {
            arch: "qwen2",
            tied: true,
            bias: true,
            seed: 3,
        };
        let (gguf, hf) = round_trip(spec, HfDtype::F32, f32_options());
        let diff = max_abs_diff(&gguf, &hf);
        assert!(diff < 1e-4, "max abs logit difference {diff}");
    }

    #[test]
    fn f16_and_bf16_folders_stay_close() {
        let spec = TinySpec {
            arch: "llama",
            tied: false,
            bias: false,
            seed: 4,
        };
        for (dtype, tolerance) in [(HfDtype::F16, 0.005), (HfDtype::Bf16, 0.03)] {
            let (gguf, hf) = round_trip(spec, dtype, f32_options());
            let scale = gguf.iter().fold(0f32, |m, v| m.max(v.abs()));
            let diff = max_abs_diff(&gguf, &hf);
            assert!(
                diff < tolerance * scale.max(1.0),
                "{dtype}: max abs logit difference {diff} (largest logit {scale})"
            );
        }
    }

    #[test]
    fn config_json_describes_the_model() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let spec = TinySpec {
            arch: "llama",
            tied: true,
            bias: false,
            seed: 5,
        };
        let gguf = GgufFile::from_bytes(Path::new("tiny.gguf"), tiny_gguf(spec)).expect("parses");
        let out = tmp.path().join("hf");
        gguf_to_hf(
            &gguf,
            &out,
            ConvertOptions {
                dtype: HfDtype::Bf16,
                force: false,
            },
        )
        .expect("converts");
        let config: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(CONFIG_FILE)).expect("config.json"),
        )
        .expect("JSON");
        assert_eq!(config["architectures"], json!(["LlamaForCausalLM"]));
        assert_eq!(config["model_type"], "llama");
        assert_eq!(config["tie_word_embeddings"], true);
        assert_eq!(config["torch_dtype"], "bfloat16");
        assert_eq!(config["rms_norm_eps"], json!(1e-5));
        assert_eq!(config["num_key_value_heads"], KV_HEADS);
        assert_eq!(config["bos_token_id"], vocab().len() - 2);
        let tokenizer_config: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(TOKENIZER_CONFIG_FILE)).expect("read"),
        )
        .expect("JSON");
        assert_eq!(tokenizer_config["bos_token"], "<|im_start|>");
        assert_eq!(tokenizer_config["eos_token"], "<|im_end|>");
        assert_eq!(tokenizer_config["add_bos_token"], true);
        let weights = std::fs::read(out.join(WEIGHTS_FILE)).expect("weights");
        let st = safetensors::SafeTensors::deserialize(&weights).expect("valid safetensors");
        assert!(
            st.tensor("lm_head.weight").is_err(),
            "a tied model has no lm_head"
        );
        let q = st
            .tensor("model.layers.0.self_attn.q_proj.weight")
            .expect("q_proj");
        assert_eq!((q.dtype(), q.shape()), (Dtype::BF16, &[DIM, DIM][..]));
        let down = st
            .tensor("model.layers.1.mlp.down_proj.weight")
            .expect("down_proj");
        assert_eq!(down.shape(), [DIM, FFN]);
    }

    #[test]
    fn refuses_a_non_empty_folder_without_force() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let spec = TinySpec {
            arch: "llama",
            tied: true,
            bias: false,
            seed: 6,
        };
        let gguf = GgufFile::from_bytes(Path::new("tiny.gguf"), tiny_gguf(spec)).expect("parses");
        std::fs::write(tmp.path().join("notes.txt"), "keep me").expect("write");
        let options = ConvertOptions {
            dtype: HfDtype::F32,
            force: false,
        };
        let err = gguf_to_hf(&gguf, tmp.path(), options).expect_err("refuses");
        assert!(matches!(err, Error::Write { .. }), "{err}");
        assert!(err.to_string().contains("not empty"), "{err}");
        assert!(
            !tmp.path().join(WEIGHTS_FILE).exists(),
            "nothing was written"
        );

        gguf_to_hf(
            &gguf,
            tmp.path(),
            ConvertOptions {
                force: true,
                ..options
            },
        )
        .expect("force writes");
        assert!(tmp.path().join(WEIGHTS_FILE).is_file());
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("notes.txt")).expect("kept"),
            "keep me"
        );

        let file = tmp.path().join("notes.txt");
        let err = gguf_to_hf(&gguf, &file, options).expect_err("a file is not a folder");
        assert!(err.to_string().contains("not a folder"), "{err}");
    }

    #[test]
    fn dtype_names_parse() {
        for dtype in [HfDtype::F32, HfDtype::F16, HfDtype::Bf16] {
            assert_eq!(dtype.name().parse::<HfDtype>(), Ok(dtype));
            assert_eq!(dtype.torch_name().parse::<HfDtype>(), Ok(dtype));
        }
        assert!("q4_0".parse::<HfDtype>().unwrap_err().contains("q4_0"));
    }
}
