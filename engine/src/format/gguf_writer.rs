//! An in-memory GGUF v3 writer for tests and tools, and a tiny random Llama built with it.
//!
//! The writer lays out exactly what it is given (it does not check tensor bytes against their
//! dims), so tests can build both valid files and files that lie; only the alignment padding is
//! computed for the caller.
//!
//! ```
//! use std::path::Path;
//! use strata_engine::format::gguf::{GgufFile, MetaValue};
//! use strata_engine::format::gguf_writer::GgufWriter;
//! use strata_engine::quant::GgmlType;
//!
//! let mut writer = GgufWriter::new();
//! writer
//!     .metadata("general.architecture", MetaValue::String("llama".into()))
//!     .tensor("norm.weight", &[4], GgmlType::F32, vec![0u8; 16]);
//! let file = GgufFile::from_bytes(Path::new("mem.gguf"), writer.to_bytes())?;
//! assert_eq!(file.tensors[0].dims, [4]);
//! # Ok::<(), strata_engine::Error>(())
//! ```

use std::io::{self, Write};

use crate::{
    format::{
        gguf::MetaValue,
        quant_plan::{FileType, fallback},
    },
    quant::{self, GgmlType},
    weights::WeightType,
};

/// `GGUF`, the first four bytes of every file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Tensor data alignment when `general.alignment` does not say otherwise.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Builds GGUF bytes in memory from metadata entries and tensors, in insertion order.
#[derive(Debug, Clone)]
pub struct GgufWriter {
    version: u32,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<TensorEntry>,
}

#[derive(Debug, Clone)]
struct TensorEntry {
    name: String,
    dims: Vec<u64>,
    kind: GgmlType,
    data: Vec<u8>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty GGUF v3 file.
    pub fn new() -> Self {
        Self {
            version: 3,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Sets the version number written in the header (any value, so that tests can write bad ones).
    pub fn version(&mut self, version: u32) -> &mut Self {
        self.version = version;
        self
    }

    /// Sets metadata `key` to `value`, replacing an earlier value in place.
    ///
    /// An empty array is written as an array of strings.
    ///
    /// # Panics
    /// When an array (at any depth) mixes item types, which GGUF cannot express.
    pub fn metadata(&mut self, key: impl Into<String>, value: MetaValue) -> &mut Self {
        let key = key.into();
        assert!(
            is_homogeneous(&value),
            "metadata {key}: GGUF arrays hold items of one type"
        );
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key, value)),
        }
        self
    }

    /// Removes metadata `key`, returning its value.
    pub fn remove_metadata(&mut self, key: &str) -> Option<MetaValue> {
        let index = self.metadata.iter().position(|(k, _)| k == key)?;
        Some(self.metadata.remove(index).1)
    }

    /// The value of metadata `key`.
    pub fn get_metadata(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Adds a tensor (replacing one of the same name in place): `dims` fastest-varying first
    /// (`[columns, rows]` for a matrix), `data` written as given.
    pub fn tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        kind: GgmlType,
        data: impl Into<Vec<u8>>,
    ) -> &mut Self {
        let entry = TensorEntry {
            name: name.into(),
            dims: dims.to_vec(),
            kind,
            data: data.into(),
        };
        match self.tensors.iter_mut().find(|t| t.name == entry.name) {
            Some(slot) => *slot = entry,
            None => self.tensors.push(entry),
        }
        self
    }

    /// Adds a tensor from f32 values, encoded (quantized if need be) as `kind`.
    ///
    /// # Panics
    /// When `kind` is a block type and `dims[0]` is not a multiple of its block size.
    pub fn tensor_f32(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        kind: WeightType,
        values: &[f32],
    ) -> &mut Self {
        let block = kind.block_size() as u64;
        assert!(
            dims.first().is_some_and(|&d| d.is_multiple_of(block)),
            "rows of {kind} tensors are whole blocks of {block}"
        );
        self.tensor(name, dims, kind.file_type(), encode_f32(values, kind))
    }

    /// Removes tensor `name`; whether it was there.
    pub fn remove_tensor(&mut self, name: &str) -> bool {
        let before = self.tensors.len();
        self.tensors.retain(|t| t.name != name);
        self.tensors.len() != before
    }

    /// The alignment tensor data is laid out with: `general.alignment` when it is a power of two,
    /// else [`DEFAULT_ALIGNMENT`].
    pub fn alignment(&self) -> u64 {
        match self
            .get_metadata("general.alignment")
            .and_then(MetaValue::as_u64)
        {
            Some(a) if a.is_power_of_two() => a,
            _ => DEFAULT_ALIGNMENT,
        }
    }

    /// The file's bytes: header, metadata, tensor table, padding, then each tensor's data at the
    /// next aligned offset, the file padded to the alignment at the end.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.header_bytes();
        let alignment = self.alignment();
        for tensor in &self.tensors {
            out.extend_from_slice(&tensor.data);
            pad_to(&mut out, alignment);
        }
        out
    }

    /// Writes the bytes of [`GgufWriter::to_bytes`] to `out` without building them in memory first.
    ///
    /// # Errors
    /// When `out` fails to take them.
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        let alignment = self.alignment();
        let header = self.header_bytes();
        out.write_all(&header)?;
        let mut written = header.len() as u64;
        for tensor in &self.tensors {
            out.write_all(&tensor.data)?;
            written += tensor.data.len() as u64;
            let padding = align_up(written, alignment) - written;
            out.write_all(&vec![0u8; padding as usize])?;
            written += padding;
        }
        Ok(())
    }

    /// Header, metadata and tensor table, padded to the alignment: everything before the data.
    fn header_bytes(&self) -> Vec<u8> {
        let alignment = self.alignment();
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_string(&mut out, key);
            out.extend_from_slice(&value_type(value).to_le_bytes());
            put_value(&mut out, value);
        }
        let mut offset = 0u64;
        for tensor in &self.tensors {
            put_string(&mut out, &tensor.name);
            out.extend_from_slice(&(tensor.dims.len() as u32).to_le_bytes());
            for dim in &tensor.dims {
                out.extend_from_slice(&dim.to_le_bytes());
            }
            out.extend_from_slice(&tensor.kind.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = align_up(offset + tensor.data.len() as u64, alignment);
        }
        pad_to(&mut out, alignment);
        out
    }
}

fn align_up(offset: u64, alignment: u64) -> u64 {
    offset.div_ceil(alignment) * alignment
}

fn pad_to(out: &mut Vec<u8>, alignment: u64) {
    let len = align_up(out.len() as u64, alignment) as usize;
    out.resize(len, 0);
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// GGUF's `gguf_metadata_value_type` of a value.
fn value_type(value: &MetaValue) -> u32 {
    match value {
        MetaValue::U8(_) => 0,
        MetaValue::I8(_) => 1,
        MetaValue::U16(_) => 2,
        MetaValue::I16(_) => 3,
        MetaValue::U32(_) => 4,
        MetaValue::I32(_) => 5,
        MetaValue::F32(_) => 6,
        MetaValue::Bool(_) => 7,
        MetaValue::String(_) => 8,
        MetaValue::Array(_) => 9,
        MetaValue::U64(_) => 10,
        MetaValue::I64(_) => 11,
        MetaValue::F64(_) => 12,
    }
}

fn is_homogeneous(value: &MetaValue) -> bool {
    match value {
        MetaValue::Array(items) => items
            .iter()
            .all(|item| value_type(item) == value_type(&items[0]) && is_homogeneous(item)),
        _ => true,
    }
}

fn put_value(out: &mut Vec<u8>, value: &MetaValue) {
    match value {
        MetaValue::U8(v) => out.push(*v),
        MetaValue::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::Bool(v) => out.push(u8::from(*v)),
        MetaValue::String(s) => put_string(out, s),
        MetaValue::Array(items) => {
            let item_type = items
                .first()
                .map_or(value_type(&MetaValue::String(String::new())), value_type);
            out.extend_from_slice(&item_type.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
        MetaValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetaValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
    }
}

/// An array of strings, as `tokenizer.ggml.tokens` holds them.
pub fn string_array<S: Into<String>>(items: impl IntoIterator<Item = S>) -> MetaValue {
    MetaValue::Array(
        items
            .into_iter()
            .map(|s| MetaValue::String(s.into()))
            .collect(),
    )
}

/// `values` encoded as GGUF stores `kind`, quantized with the engine's reference quantizers.
///
/// # Panics
/// When `kind` is a block type and `values.len()` is not a multiple of its block size.
pub fn encode_f32(values: &[f32], kind: WeightType) -> Vec<u8> {
    quant::quantize_bytes(kind.file_type(), values).unwrap_or_else(|err| panic!("{err}"))
}

/// Special tokens of the tiny model, at ids 0, 1 and 2 (as in SmolLM2).
const TINY_SPECIAL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
/// Byte-level BPE merges of the tiny model, in rank order; each joins two earlier tokens.
const TINY_MERGES: [(&str, &str); 41] = [
    ("Ġ", "t"),
    ("h", "e"),
    ("Ġt", "he"),
    ("Ġ", "a"),
    ("i", "n"),
    ("e", "r"),
    ("o", "n"),
    ("r", "e"),
    ("a", "n"),
    ("Ġ", "s"),
    ("e", "n"),
    ("a", "t"),
    ("o", "r"),
    ("Ġ", "w"),
    ("e", "s"),
    ("i", "s"),
    ("i", "t"),
    ("Ġ", "o"),
    ("Ġ", "c"),
    ("l", "l"),
    ("Ġ", "b"),
    ("a", "r"),
    ("e", "d"),
    ("Ġ", "f"),
    ("in", "g"),
    ("Ġ", "m"),
    ("o", "u"),
    ("Ġ", "p"),
    ("l", "e"),
    ("Ġ", "h"),
    ("Ġt", "o"),
    ("Ġ", "i"),
    ("Ġa", "n"),
    ("Ġan", "d"),
    ("Ġo", "f"),
    ("Ġ", "d"),
    ("Ġ", "l"),
    ("Ġ", "n"),
    ("h", "i"),
    ("s", "t"),
    ("Ġ", "g"),
];
/// A ChatML template, as SmolLM2 ships one.
const TINY_CHAT_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + \
     message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ \
     '<|im_start|>assistant\\n' }}{% endif %}";

/// GGUF `token_type` of normal tokens.
const TOKEN_TYPE_NORMAL: i32 = 1;
/// GGUF `token_type` of control tokens.
const TOKEN_TYPE_CONTROL: i32 = 3;

/// The shape of a tiny random Llama; [`TinyLlama::default`] is the one [`tiny_llama_gguf`] builds.
///
/// The vocabulary is fixed: 3 ChatML special tokens (`<|endoftext|>` = 0, `<|im_start|>` = 1 = BOS,
/// `<|im_end|>` = 2 = EOS), the 256 GPT-2 byte tokens (byte `b` at id `3 + b`), then 41 merges:
/// [`TinyLlama::VOCAB_SIZE`] tokens in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TinyLlama {
    /// Transformer blocks.
    pub n_layers: usize,
    /// Hidden width (a multiple of 32 and of `n_heads`).
    pub dim: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Feed-forward width (a multiple of 32).
    pub ffn_dim: usize,
    /// Trained context length written in the metadata.
    pub context_length: usize,
    /// Whether the output head reuses the embedding (no `output.weight` tensor).
    pub tied_embeddings: bool,
    /// `general.architecture` (`llama`, `qwen2`, `qwen3` or `gemma3`), with that architecture's
    /// metadata prefix and extra tensors (per-head Q/K norms; Gemma's post-norms).
    pub architecture: &'static str,
    /// Width of one head, written as `attention.key_length`; `None` for `dim / n_heads`.
    pub head_dim: Option<usize>,
    /// Gemma 3's sliding window: its size and the period of the layer pattern (the last layer of
    /// every period is global).
    pub sliding_window: Option<(usize, usize)>,
}

impl Default for TinyLlama {
    fn default() -> Self {
        Self {
            n_layers: 2,
            dim: 64,
            n_heads: 4,
            n_kv_heads: 2,
            ffn_dim: 128,
            context_length: 128,
            tied_embeddings: false,
            architecture: "llama",
            head_dim: None,
            sliding_window: None,
        }
    }
}

impl TinyLlama {
    /// Tokens in the tiny vocabulary.
    pub const VOCAB_SIZE: usize = TINY_SPECIAL_TOKENS.len() + 256 + TINY_MERGES.len();

    /// A writer holding the whole model: llama metadata, a gpt2 tokenizer, and seeded random weights
    /// (matrices as `weight_type`, norms as F32), ready to be modified or serialized.
    ///
    /// # Panics
    /// When `dim`, `ffn_dim` or the query width is not a multiple of 32, or without a head size
    /// `n_heads` does not divide `dim`.
    pub fn writer(&self, seed: u64, weight_type: WeightType) -> GgufWriter {
        assert!(
            self.dim.is_multiple_of(32)
                && self.ffn_dim.is_multiple_of(32)
                && (self.n_heads * self.head_size()).is_multiple_of(32),
            "widths are whole blocks of 32"
        );
        assert!(
            self.n_heads > 0 && (self.head_dim.is_some() || self.dim.is_multiple_of(self.n_heads)),
            "heads divide the width"
        );
        let mut w = GgufWriter::new();
        self.write_metadata(&mut w, weight_type);
        self.write_tokenizer(&mut w);
        self.write_tensors(&mut w, &mut SplitMix64(seed), weight_type);
        w
    }

    /// Width of one head.
    pub fn head_size(&self) -> usize {
        self.head_dim.unwrap_or(self.dim / self.n_heads.max(1))
    }

    fn write_metadata(&self, w: &mut GgufWriter, weight_type: WeightType) {
        let u32_of = |v: usize| MetaValue::U32(v as u32);
        let arch = self.architecture;
        let key = |k: &str| format!("{arch}.{k}");
        let file_type = FileType::holding(weight_type).id();
        w.metadata("general.architecture", MetaValue::String(arch.into()))
            .metadata(
                "general.name",
                MetaValue::String(format!("tiny-random-{arch}")),
            )
            .metadata("general.file_type", MetaValue::U32(file_type))
            .metadata(key("context_length"), u32_of(self.context_length))
            .metadata(key("embedding_length"), u32_of(self.dim))
            .metadata(key("block_count"), u32_of(self.n_layers))
            .metadata(key("feed_forward_length"), u32_of(self.ffn_dim))
            .metadata(key("attention.head_count"), u32_of(self.n_heads))
            .metadata(key("attention.head_count_kv"), u32_of(self.n_kv_heads))
            .metadata(key("rope.dimension_count"), u32_of(self.head_size()))
            .metadata(key("rope.freq_base"), MetaValue::F32(10_000.0))
            .metadata(
                key("attention.layer_norm_rms_epsilon"),
                MetaValue::F32(1e-5),
            )
            .metadata(key("vocab_size"), u32_of(Self::VOCAB_SIZE));
        if let Some(head_dim) = self.head_dim {
            w.metadata(key("attention.key_length"), u32_of(head_dim))
                .metadata(key("attention.value_length"), u32_of(head_dim));
        }
        if let Some((size, period)) = self.sliding_window {
            w.metadata(key("attention.sliding_window"), u32_of(size))
                .metadata(key("attention.sliding_window_pattern"), u32_of(period))
                .metadata(key("rope.freq_base"), MetaValue::F32(1_000_000.0));
        }
    }

    fn write_tokenizer(&self, w: &mut GgufWriter) {
        let mut tokens: Vec<String> = TINY_SPECIAL_TOKENS.iter().map(|s| s.to_string()).collect();
        tokens.extend((0..=255u8).map(|b| byte_level_char(b).to_string()));
        tokens.extend(TINY_MERGES.iter().map(|(a, b)| format!("{a}{b}")));
        let types = (0..tokens.len())
            .map(|id| {
                MetaValue::I32(if id < TINY_SPECIAL_TOKENS.len() {
                    TOKEN_TYPE_CONTROL
                } else {
                    TOKEN_TYPE_NORMAL
                })
            })
            .collect();
        w.metadata("tokenizer.ggml.model", MetaValue::String("gpt2".into()))
            .metadata("tokenizer.ggml.pre", MetaValue::String("default".into()))
            .metadata("tokenizer.ggml.tokens", string_array(tokens))
            .metadata("tokenizer.ggml.token_type", MetaValue::Array(types))
            .metadata(
                "tokenizer.ggml.merges",
                string_array(TINY_MERGES.iter().map(|(a, b)| format!("{a} {b}"))),
            )
            .metadata("tokenizer.ggml.bos_token_id", MetaValue::U32(1))
            .metadata("tokenizer.ggml.eos_token_id", MetaValue::U32(2))
            .metadata("tokenizer.ggml.add_bos_token", MetaValue::Bool(false))
            .metadata(
                "tokenizer.chat_template",
                MetaValue::String(TINY_CHAT_TEMPLATE.into()),
            );
    }

    fn write_tensors(&self, w: &mut GgufWriter, rng: &mut SplitMix64, weight_type: WeightType) {
        let (d, f, v) = (self.dim, self.ffn_dim, Self::VOCAB_SIZE);
        let hd = self.head_size();
        let (q, kv) = (self.n_heads * hd, self.n_kv_heads * hd);
        let qk_norm = matches!(self.architecture, "qwen3" | "gemma3");
        let post_norms = self.architecture == "gemma3";
        let mut matrix = |w: &mut GgufWriter, name: &str, rows: usize, cols: usize, scale: f32| {
            let values: Vec<f32> = (0..rows * cols).map(|_| rng.uniform() * scale).collect();
            // As llama-quantize does, rows that are not whole super-blocks take a 32-wide type.
            let kind = fallback(cols as u64, weight_type.file_type());
            w.tensor_f32(
                name,
                &[cols as u64, rows as u64],
                WeightType::of_file_type(kind),
                &values,
            );
        };
        let norm_of = |w: &mut GgufWriter, name: &str, len: usize| {
            let values: Vec<f32> = (0..len)
                .map(|i| 1.0 + 0.05 * ((i % 7) as f32 - 3.0))
                .collect();
            w.tensor_f32(name, &[len as u64], WeightType::F32, &values);
        };
        let norm = |w: &mut GgufWriter, name: &str| norm_of(w, name, d);
        let (in_d, in_q, in_f) = (
            1.0 / (d as f32).sqrt(),
            1.0 / (q as f32).sqrt(),
            1.0 / (f as f32).sqrt(),
        );
        matrix(w, "token_embd.weight", v, d, 1.0);
        for i in 0..self.n_layers {
            let name = |suffix: &str| format!("blk.{i}.{suffix}");
            norm(w, &name("attn_norm.weight"));
            matrix(w, &name("attn_q.weight"), q, d, in_d);
            matrix(w, &name("attn_k.weight"), kv, d, in_d);
            matrix(w, &name("attn_v.weight"), kv, d, in_d);
            matrix(w, &name("attn_output.weight"), d, q, in_q);
            if qk_norm {
                norm_of(w, &name("attn_q_norm.weight"), hd);
                norm_of(w, &name("attn_k_norm.weight"), hd);
            }
            if post_norms {
                norm(w, &name("post_attention_norm.weight"));
                norm(w, &name("post_ffw_norm.weight"));
            }
            norm(w, &name("ffn_norm.weight"));
            matrix(w, &name("ffn_gate.weight"), f, d, in_d);
            matrix(w, &name("ffn_up.weight"), f, d, in_d);
            matrix(w, &name("ffn_down.weight"), d, f, in_f);
        }
        norm(w, "output_norm.weight");
        if !self.tied_embeddings {
            matrix(w, "output.weight", v, d, in_d);
        }
    }
}

/// The bytes of a tiny random Llama ([`TinyLlama::default`]: 2 layers, width 64, 4 query and 2
/// key/value heads, feed-forward 128, a 300-token byte-level BPE vocabulary) with its matrices
/// stored as `weight_type`; the same `seed` gives the same bytes.
pub fn tiny_llama_gguf(seed: u64, weight_type: WeightType) -> Vec<u8> {
    TinyLlama::default().writer(seed, weight_type).to_bytes()
}

/// GPT-2's printable stand-in for a byte (`Ġ` for space): printable Latin-1 bytes stand for
/// themselves, the others map in order to U+0100 and up.
pub(crate) fn byte_level_char(byte: u8) -> char {
    let printable = |b: u8| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    if printable(byte) {
        return char::from(byte);
    }
    let rank = (0..byte).filter(|&b| !printable(b)).count() as u32;
    char::from_u32(256 + rank).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// SplitMix64: a tiny, fixed, seedable generator, so weights do not change with library versions.
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub(crate) fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::{
        format::gguf::GgufFile,
        model::{Llama, LlamaConfig, LoadOptions, Logits},
        tokenizer::Tokenizer,
    };

    #[test]
    fn every_value_type_round_trips() {
        let values = [
            ("u8", MetaValue::U8(200)),
            ("i8", MetaValue::I8(-3)),
            ("u16", MetaValue::U16(65_000)),
            ("i16", MetaValue::I16(-30_000)),
            ("u32", MetaValue::U32(4_000_000_000)),
            ("i32", MetaValue::I32(-2_000_000_000)),
            ("f32", MetaValue::F32(1.5)),
            ("bool", MetaValue::Bool(true)),
            ("string", MetaValue::String("héllo".into())),
            ("u64", MetaValue::U64(u64::MAX)),
            ("i64", MetaValue::I64(i64::MIN)),
            ("f64", MetaValue::F64(-0.25)),
            (
                "array",
                MetaValue::Array(vec![MetaValue::U16(1), MetaValue::U16(2)]),
            ),
            (
                "nested",
                MetaValue::Array(vec![
                    MetaValue::Array(vec![MetaValue::String("a".into())]),
                    MetaValue::Array(vec![MetaValue::F64(1.0), MetaValue::F64(2.0)]),
                ]),
            ),
            ("empty", MetaValue::Array(vec![])),
        ];
        let mut w = GgufWriter::new();
        for (key, value) in &values {
            w.metadata(*key, value.clone());
        }
        let file = GgufFile::from_bytes(Path::new("values.gguf"), w.to_bytes()).expect("parses");
        assert_eq!(file.version, 3);
        for (key, value) in &values {
            assert_eq!(file.meta(key), Some(value), "{key}");
        }
    }

    #[test]
    fn tensors_land_aligned_with_their_bytes() {
        let mut w = GgufWriter::new();
        w.metadata("general.alignment", MetaValue::U32(64))
            .tensor("a", &[3], GgmlType::F32, vec![1u8; 12])
            .tensor("b", &[32, 2], GgmlType::Q8_0, vec![2u8; 68])
            .tensor("c", &[5], GgmlType::F16, vec![3u8; 10]);
        let bytes = w.to_bytes();
        assert_eq!(bytes.len() % 64, 0);
        let file = GgufFile::from_bytes(Path::new("tensors.gguf"), bytes).expect("parses");
        assert_eq!(file.alignment, 64);
        for (info, (fill, len)) in file.tensors.iter().zip([(1u8, 12), (2, 68), (3, 10)]) {
            assert_eq!(info.offset % 64, 0, "{}", info.name);
            assert_eq!(file.tensor_data(info), vec![fill; len], "{}", info.name);
        }
    }

    #[test]
    fn writing_to_a_stream_gives_the_same_bytes() {
        let mut w = GgufWriter::new();
        w.metadata("general.alignment", MetaValue::U32(64))
            .tensor("a", &[3], GgmlType::F32, vec![1u8; 12])
            .tensor("b", &[32, 2], GgmlType::Q8_0, vec![2u8; 68]);
        let mut streamed = Vec::new();
        w.write_to(&mut streamed).expect("writes to memory");
        assert_eq!(streamed, w.to_bytes());
        assert_eq!(streamed.len() % 64, 0);
    }

    #[test]
    fn metadata_and_tensors_are_replaced_and_removed_by_name() {
        let mut w = GgufWriter::new();
        w.metadata("k", MetaValue::U8(1))
            .metadata("k", MetaValue::U8(2));
        w.tensor("t", &[1], GgmlType::F32, vec![0; 4])
            .tensor("t", &[2], GgmlType::F32, vec![0; 8]);
        assert_eq!(w.get_metadata("k"), Some(&MetaValue::U8(2)));
        let file = GgufFile::from_bytes(Path::new("r.gguf"), w.to_bytes()).expect("parses");
        assert_eq!((file.metadata.len(), file.tensors.len()), (1, 1));
        assert_eq!(file.tensors[0].dims, [2]);
        assert_eq!(w.remove_metadata("k"), Some(MetaValue::U8(2)));
        assert!(w.remove_tensor("t"));
        assert!(!w.remove_tensor("t"));
    }

    #[test]
    #[should_panic(expected = "one type")]
    fn mixed_arrays_are_refused() {
        GgufWriter::new().metadata(
            "mixed",
            MetaValue::Array(vec![MetaValue::U8(1), MetaValue::I8(1)]),
        );
    }

    #[test]
    fn byte_level_alphabet_is_gpt2s() {
        assert_eq!(byte_level_char(b' '), 'Ġ');
        assert_eq!(byte_level_char(b'\n'), 'Ċ');
        assert_eq!(byte_level_char(b'a'), 'a');
        assert_eq!(byte_level_char(0), 'Ā');
        let distinct: std::collections::HashSet<char> = (0..=255u8).map(byte_level_char).collect();
        assert_eq!(distinct.len(), 256);
    }

    #[test]
    fn tiny_model_is_deterministic_per_seed() {
        assert_eq!(
            tiny_llama_gguf(7, WeightType::Q8_0),
            tiny_llama_gguf(7, WeightType::Q8_0)
        );
        assert_ne!(
            tiny_llama_gguf(7, WeightType::Q8_0),
            tiny_llama_gguf(8, WeightType::Q8_0)
        );
    }

    #[test]
    fn tiny_vocabulary_has_300_distinct_tokens() {
        let bytes = tiny_llama_gguf(7, WeightType::F32);
        let file = GgufFile::from_bytes(Path::new("tiny.gguf"), bytes).expect("parses");
        let tokens = file
            .meta("tokenizer.ggml.tokens")
            .and_then(MetaValue::as_array)
            .expect("tokens");
        let distinct: std::collections::HashSet<&str> =
            tokens.iter().filter_map(MetaValue::as_str).collect();
        assert_eq!((distinct.len(), tokens.len()), (300, TinyLlama::VOCAB_SIZE));
    }

    #[test]
    fn tiny_model_loads_tokenizes_and_runs_in_every_weight_type() {
        // K-quant rows are whole super-blocks of 256: those types take a model wide enough for them.
        let wide = TinyLlama {
            dim: 256,
            ffn_dim: 512,
            ..TinyLlama::default()
        };
        for kind in WeightType::ALL {
            let shape = if kind.block_size() > 32 {
                wide
            } else {
                TinyLlama::default()
            };
            let bytes = shape.writer(1, kind).to_bytes();
            let file = GgufFile::from_bytes(Path::new("tiny.gguf"), bytes).expect("parses");
            let config = LlamaConfig::from_gguf(&file).expect("config");
            assert_eq!((config.n_layers, config.dim), (2, shape.dim));
            assert_eq!(config.vocab_size, TinyLlama::VOCAB_SIZE);
            let tokenizer = Tokenizer::from_gguf(&file).expect("tokenizer");
            let ids = tokenizer.encode("the cat and the hat").expect("encodes");
            assert!(
                ids.len() < "the cat and the hat".len(),
                "merges apply: {ids:?}"
            );
            assert_eq!(tokenizer.decode(&ids), "the cat and the hat");
            assert_eq!((tokenizer.bos(), tokenizer.eos()), (Some(1), Some(2)));
            let model = Llama::load(
                config,
                &file,
                LoadOptions {
                    weights: None,
                    threads: 1,
                    placement: Default::default(),
                },
            )
            .expect("loads");
            assert_eq!(model.weight_type(), kind);
            let mut cache = model.new_cache(16);
            let logits = model.forward(&ids, &mut cache, Logits::All).expect("runs");
            assert_eq!(logits.len(), ids.len() * TinyLlama::VOCAB_SIZE);
            assert!(
                logits.iter().all(|v| v.is_finite()),
                "{kind}: finite logits"
            );
            let next = model
                .forward(&[2], &mut cache, Logits::Last)
                .expect("decodes");
            assert_eq!(next.len(), TinyLlama::VOCAB_SIZE);
        }
    }
}
