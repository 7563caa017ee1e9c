//! GGUF files with random weights at the real shapes and tensor types of deployed models (Llama 3.2
//! 1B and 3B, Llama 3.1 8B, Qwen 2.5 7B, Gemma 3 1B and 4B), for measuring speed and memory where the
//! real weights cannot be had. Each file says so in its metadata ([`SYNTHETIC_KEY`]).
//!
//! Each tensor gets the type llama-quantize's rules give it in the chosen mix (Q4_K_M puts
//! `attn_v` and half of `ffn_down` in Q6_K, the output head in Q6_K, ...), and random blocks of
//! that type whose scales are set so that a row's values are about `1 / sqrt(columns)` in size:
//! activations stay finite through every layer. The tokenizer is a byte-level BPE vocabulary of
//! the model's size (256 byte tokens, filler tokens, and Llama 3's special tokens at their ids), so
//! any text tokenizes, and llama.cpp reads the files too.

use std::{fmt, path::Path, str::FromStr};

use half::f16;

use crate::{
    error::{Error, Result},
    format::{
        gguf::{MetaValue, SYNTHETIC_KEY},
        gguf_writer::{GgufWriter, SplitMix64, byte_level_char, string_array},
        quant_plan::{FileType, TensorPlan, plan_tensors},
    },
    quant::{self, GgmlType},
};

/// llama.cpp's token type of an ordinary token.
const TOKEN_TYPE_NORMAL: i32 = 1;
/// llama.cpp's token type of a control token.
const TOKEN_TYPE_CONTROL: i32 = 3;
/// Llama 3's special tokens: the last 256 ids (from 128000 in its 128256-token vocabulary).
const SPECIAL_TOKENS: usize = 256;

/// The hyperparameters of a model shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SynthShape {
    /// The name on the command line (`llama-3.2-1b`).
    pub name: &'static str,
    /// `general.architecture`: `llama`, `qwen2` (biased Q/K/V) or `gemma3` (Q/K norms, post-norms,
    /// sliding-window layers).
    pub architecture: &'static str,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Hidden width.
    pub dim: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Feed-forward width.
    pub ffn_dim: usize,
    /// Vocabulary size (at least 512: 256 byte tokens and 256 special ones).
    pub vocab: usize,
    /// Whether the output head reuses the embedding.
    pub tied_embeddings: bool,
    /// RoPE base (of the global layers, for Gemma 3).
    pub rope_base: f32,
    /// Gemma 3: the sliding window and the period of the layer pattern (every `period`-th layer is
    /// global).
    pub sliding_window: Option<(usize, usize)>,
}

/// A Llama-architecture shape with Llama 3's vocabulary and RoPE base.
const fn llama(
    name: &'static str,
    (n_layers, dim, ffn_dim): (usize, usize, usize),
    (n_heads, n_kv_heads, head_dim): (usize, usize, usize),
    tied_embeddings: bool,
) -> SynthShape {
    SynthShape {
        name,
        architecture: "llama",
        n_layers,
        dim,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn_dim,
        vocab: 128_256,
        tied_embeddings,
        rope_base: 500_000.0,
        sliding_window: None,
    }
}

/// A Gemma 3 shape: tied head, 256-wide heads, five sliding-window layers to one global.
const fn gemma3(
    name: &'static str,
    (n_layers, dim, ffn_dim, vocab): (usize, usize, usize, usize),
    (n_heads, n_kv_heads, window): (usize, usize, usize),
) -> SynthShape {
    SynthShape {
        name,
        architecture: "gemma3",
        n_layers,
        dim,
        n_heads,
        n_kv_heads,
        head_dim: 256,
        ffn_dim,
        vocab,
        tied_embeddings: true,
        rope_base: 1_000_000.0,
        sliding_window: Some((window, 6)),
    }
}

/// The shapes `strata model synth` writes.
pub const SHAPES: [SynthShape; 6] = [
    llama("llama-3.2-1b", (16, 2048, 8192), (32, 8, 64), true),
    llama("llama-3.2-3b", (28, 3072, 8192), (24, 8, 128), true),
    llama("llama-3.1-8b", (32, 4096, 14_336), (32, 8, 128), false),
    SynthShape {
        name: "qwen2.5-7b",
        architecture: "qwen2",
        n_layers: 28,
        dim: 3584,
        n_heads: 28,
        n_kv_heads: 4,
        head_dim: 128,
        ffn_dim: 18_944,
        vocab: 152_064,
        tied_embeddings: false,
        rope_base: 1_000_000.0,
        sliding_window: None,
    },
    gemma3("gemma-3-1b", (26, 1152, 6912, 262_144), (4, 1, 512)),
    gemma3("gemma-3-4b", (34, 2560, 10_240, 262_208), (8, 4, 1024)),
];

impl fmt::Display for SynthShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl FromStr for SynthShape {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        SHAPES
            .into_iter()
            .find(|shape| shape.name.eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let known: Vec<&str> = SHAPES.iter().map(|shape| shape.name).collect();
                format!("unknown shape {s:?} (expected one of {})", known.join(", "))
            })
    }
}

impl SynthShape {
    /// Refuses a shape no model has: a part of zero, query heads that are not whole groups of the
    /// key/value heads, or a width that is not whole 32-value blocks.
    fn check(&self) -> Result<()> {
        let refuse = |what: String| Err(Error::model(Path::new(self.name), what));
        let parts = [
            ("layers", self.n_layers),
            ("width", self.dim),
            ("feed-forward width", self.ffn_dim),
            ("query heads", self.n_heads),
            ("key/value heads", self.n_kv_heads),
            ("head width", self.head_dim),
        ];
        if let Some((name, _)) = parts.iter().find(|(_, v)| *v == 0) {
            return refuse(format!("{name} must be at least 1"));
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return refuse(format!(
                "{} query heads are not whole groups of {} key/value heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        let widths = [
            ("width", self.dim),
            ("feed-forward width", self.ffn_dim),
            ("head width", self.head_dim),
        ];
        if let Some((name, v)) = widths.iter().find(|(_, v)| !v.is_multiple_of(32)) {
            return refuse(format!("a {name} of {v} is not whole blocks of 32 values"));
        }
        Ok(())
    }

    /// The matrices and vectors of the model as (name, dims fastest-varying first), in file order.
    fn tensors(&self) -> Vec<(String, Vec<u64>)> {
        let (d, f, v) = (self.dim as u64, self.ffn_dim as u64, self.vocab as u64);
        let head = self.head_dim as u64;
        let (q, kv) = (head * self.n_heads as u64, head * self.n_kv_heads as u64);
        let gemma = self.architecture == "gemma3";
        let mut out = vec![("token_embd.weight".to_owned(), vec![d, v])];
        for i in 0..self.n_layers {
            let name = |suffix: &str| format!("blk.{i}.{suffix}");
            out.extend([
                (name("attn_norm.weight"), vec![d]),
                (name("attn_q.weight"), vec![d, q]),
                (name("attn_k.weight"), vec![d, kv]),
                (name("attn_v.weight"), vec![d, kv]),
            ]);
            if self.architecture == "qwen2" {
                out.extend([
                    (name("attn_q.bias"), vec![q]),
                    (name("attn_k.bias"), vec![kv]),
                    (name("attn_v.bias"), vec![kv]),
                ]);
            }
            out.push((name("attn_output.weight"), vec![q, d]));
            if gemma {
                out.extend([
                    (name("attn_q_norm.weight"), vec![head]),
                    (name("attn_k_norm.weight"), vec![head]),
                    (name("post_attention_norm.weight"), vec![d]),
                    (name("post_ffw_norm.weight"), vec![d]),
                ]);
            }
            out.extend([
                (name("ffn_norm.weight"), vec![d]),
                (name("ffn_gate.weight"), vec![d, f]),
                (name("ffn_up.weight"), vec![d, f]),
                (name("ffn_down.weight"), vec![f, d]),
            ]);
        }
        out.push(("output_norm.weight".to_owned(), vec![d]));
        if !self.tied_embeddings {
            out.push(("output.weight".to_owned(), vec![d, v]));
        }
        out
    }

    fn write_metadata(&self, w: &mut GgufWriter, ftype: FileType) {
        let u32_of = |v: usize| MetaValue::U32(v as u32);
        let arch = self.architecture;
        let key = |k: &str| format!("{arch}.{k}");
        let eps = if arch == "llama" { 1e-5 } else { 1e-6 };
        w.metadata("general.architecture", MetaValue::String(arch.into()))
            .metadata(
                "general.name",
                MetaValue::String(format!("synthetic {} {}", self.name, ftype.name())),
            )
            .metadata(SYNTHETIC_KEY, MetaValue::Bool(true))
            .metadata(key("context_length"), u32_of(131_072))
            .metadata(key("embedding_length"), u32_of(self.dim))
            .metadata(key("block_count"), u32_of(self.n_layers))
            .metadata(key("feed_forward_length"), u32_of(self.ffn_dim))
            .metadata(key("attention.head_count"), u32_of(self.n_heads))
            .metadata(key("attention.head_count_kv"), u32_of(self.n_kv_heads))
            .metadata(key("attention.key_length"), u32_of(self.head_dim))
            .metadata(key("attention.value_length"), u32_of(self.head_dim))
            .metadata(key("rope.dimension_count"), u32_of(self.head_dim))
            .metadata(key("rope.freq_base"), MetaValue::F32(self.rope_base))
            .metadata(key("attention.layer_norm_rms_epsilon"), MetaValue::F32(eps))
            .metadata(key("vocab_size"), u32_of(self.vocab));
        if let Some((size, period)) = self.sliding_window {
            w.metadata(key("attention.sliding_window"), u32_of(size))
                .metadata(key("attention.sliding_window_pattern"), u32_of(period));
        }
        self.write_tokenizer(w);
        w.metadata("general.quantization_version", MetaValue::U32(2))
            .metadata("general.file_type", MetaValue::U32(ftype.id()));
    }

    /// A byte-level BPE vocabulary of the model's size: the 256 byte tokens, filler tokens no text
    /// produces, and Llama 3's special tokens from id 128000 (begin and end of text, end of turn).
    fn write_tokenizer(&self, w: &mut GgufWriter) {
        let first_special = self.vocab - SPECIAL_TOKENS;
        let mut tokens: Vec<String> = (0..=255u8)
            .map(|b| byte_level_char(b).to_string())
            .collect();
        tokens.extend((256..first_special).map(|i| format!("[filler-{i}]")));
        tokens.extend(
            (first_special..self.vocab).map(|i| match i - first_special {
                0 => "<|begin_of_text|>".to_owned(),
                1 => "<|end_of_text|>".to_owned(),
                9 => "<|eot_id|>".to_owned(),
                k => format!("<|reserved_special_token_{k}|>"),
            }),
        );
        let types = (0..tokens.len())
            .map(|id| {
                MetaValue::I32(if id >= first_special {
                    TOKEN_TYPE_CONTROL
                } else {
                    TOKEN_TYPE_NORMAL
                })
            })
            .collect();
        let id = |k: usize| MetaValue::U32((first_special + k) as u32);
        w.metadata("tokenizer.ggml.model", MetaValue::String("gpt2".into()))
            .metadata("tokenizer.ggml.pre", MetaValue::String("llama-bpe".into()))
            .metadata("tokenizer.ggml.tokens", string_array(tokens))
            .metadata("tokenizer.ggml.token_type", MetaValue::Array(types))
            .metadata("tokenizer.ggml.merges", string_array(Vec::<String>::new()))
            .metadata("tokenizer.ggml.bos_token_id", id(0))
            .metadata("tokenizer.ggml.eos_token_id", id(9))
            .metadata("tokenizer.ggml.add_bos_token", MetaValue::Bool(true));
    }
}

/// A GGUF file of `shape` with random weights in the types `ftype`'s rules give each tensor; the
/// same seed gives the same bytes.
///
/// # Errors
/// When the vocabulary is under 512 tokens, the type rules refuse a tensor, or a row is not whole
/// blocks of its type (neither happens for the shapes of [`SHAPES`]).
pub fn synth(
    shape: &SynthShape,
    ftype: FileType,
    seed: u64,
) -> Result<(GgufWriter, Vec<TensorPlan>)> {
    shape.check()?;
    if shape.vocab < 2 * SPECIAL_TOKENS {
        return Err(Error::model(
            Path::new(shape.name),
            format!(
                "a vocabulary of {} tokens has no room for 256 byte and 256 special tokens",
                shape.vocab
            ),
        ));
    }
    let mut w = GgufWriter::new();
    shape.write_metadata(&mut w, ftype);
    let tensors = shape.tensors();
    let entries: Vec<_> = tensors
        .iter()
        .map(|(name, dims)| (name.as_str(), dims.as_slice(), GgmlType::F32))
        .collect();
    let plan = plan_tensors(
        Path::new(shape.name),
        |key| w.get_metadata(key),
        &entries,
        ftype,
    )?;
    let mut rng = SplitMix64(seed);
    for tensor in &plan {
        let bytes = if tensor.dims.len() == 1 {
            // Norm weights of one, biases of zero.
            let value = if tensor.name.ends_with(".bias") {
                0.0
            } else {
                1.0
            };
            quant::quantize_bytes(tensor.to, &vec![value; tensor.dims[0] as usize])?
        } else {
            random_blocks(&mut rng, tensor.to, &tensor.dims)?
        };
        w.tensor(&tensor.name, &tensor.dims, tensor.to, bytes);
    }
    Ok((w, plan))
}

/// Random blocks of `kind` for a matrix of `dims`, scaled so that values are about
/// `1 / sqrt(columns)`.
fn random_blocks(rng: &mut SplitMix64, kind: GgmlType, dims: &[u64]) -> Result<Vec<u8>> {
    let columns = dims[0] as usize;
    let elements: usize = dims.iter().map(|&d| d as usize).product();
    let target = 1.0 / (columns as f32).sqrt();
    if kind.block_size() == 1 {
        let values: Vec<f32> = (0..elements).map(|_| rng.uniform() * target).collect();
        return quant::quantize_bytes(kind, &values);
    }
    let mut bytes = vec![0u8; elements / kind.block_size() * kind.block_bytes()];
    for chunk in bytes.chunks_mut(8) {
        let word = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    let (scale, minimum) = scales(kind, target);
    for block in bytes.chunks_exact_mut(kind.block_bytes()) {
        for &(field, at) in quant::scale_fields(kind) {
            let value = if field == "d" { scale } else { minimum };
            block[at..at + 2].copy_from_slice(&f16::from_f32(value).to_le_bytes());
        }
    }
    Ok(bytes)
}

/// The block scale (`d`) and minimum (`m` or `dmin`) that give random quantized values of `kind`
/// about `target` in size and centred near zero.
fn scales(kind: GgmlType, target: f32) -> (f32, f32) {
    match kind {
        // (q - 8) d and (q - 16) d.
        GgmlType::Q4_0 => (target / 4.0, 0.0),
        GgmlType::Q5_0 => (target / 8.0, 0.0),
        // q d + m with q up to 15 or 31.
        GgmlType::Q4_1 => (target / 4.0, -2.0 * target),
        GgmlType::Q5_1 => (target / 8.0, -2.0 * target),
        // q d with q in [-128, 127].
        GgmlType::Q8_0 => (target / 64.0, 0.0),
        // d sc q - dmin m with 6-bit sc and m: about 32 * 7.5 d less 32 dmin.
        GgmlType::Q4K => (target / 240.0, 7.5 * target / 240.0),
        GgmlType::Q5K => (target / 480.0, 15.5 * target / 480.0),
        // d sc (q - 32) with int8 sc.
        GgmlType::Q6K => (target / 1200.0, 0.0),
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => (1.0, 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        format::gguf::GgufFile,
        model::{Llama, LlamaConfig, LoadOptions, Logits},
        tokenizer::Tokenizer,
    };

    /// A Llama 3.2 1B cut to two layers and a small vocabulary, written as Q4_K_M: its types follow
    /// llama-quantize's rules, and it loads, tokenizes and runs to finite logits.
    #[test]
    fn a_small_llama_3_shape_loads_and_runs_in_q4_k_m() {
        let shape = SynthShape {
            n_layers: 2,
            vocab: 1024,
            ffn_dim: 1024,
            dim: 512,
            n_heads: 8,
            n_kv_heads: 2,
            ..SHAPES[0]
        };
        let (writer, plan) = synth(&shape, FileType::Q4KM, 7).expect("synthesizes");
        let kind = |name: &str| plan.iter().find(|t| t.name == name).expect(name).to;
        assert_eq!(kind("token_embd.weight"), GgmlType::Q6K, "tied embeddings");
        assert_eq!(kind("blk.0.attn_q.weight"), GgmlType::Q4K);
        // Of two layers, llama-quantize's `use_more_bits` picks the last.
        assert_eq!(kind("blk.0.attn_v.weight"), GgmlType::Q4K);
        assert_eq!(kind("blk.1.attn_v.weight"), GgmlType::Q6K);
        assert_eq!(kind("blk.1.ffn_down.weight"), GgmlType::Q6K);
        assert_eq!(kind("blk.0.attn_norm.weight"), GgmlType::F32);
        let file =
            GgufFile::from_bytes(Path::new("synth.gguf"), writer.to_bytes()).expect("parses");
        let config = LlamaConfig::from_gguf(&file).expect("config");
        assert_eq!(
            (config.n_layers, config.dim, config.vocab_size),
            (2, 512, 1024)
        );
        let tokenizer = Tokenizer::from_gguf(&file).expect("tokenizer");
        let ids = tokenizer.encode("any text at all").expect("encodes");
        assert_eq!(ids[0], 1024 - 256, "<|begin_of_text|> first");
        assert!(ids[1..].iter().all(|&id| id < 256), "byte tokens: {ids:?}");
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
        let mut cache = model.new_cache(32);
        let logits = model.forward(&ids, &mut cache, Logits::Last).expect("runs");
        assert_eq!(logits.len(), shape.vocab);
        assert!(logits.iter().all(|v| v.is_finite()), "finite logits");
        let spread = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max)
            - logits.iter().copied().fold(f32::INFINITY, f32::min);
        assert!(spread > 0.0, "logits differ between tokens");
    }

    /// Every shape, cut to two layers, a small vocabulary and narrow matrices, loads and runs to
    /// finite logits in its own architecture, and is marked synthetic.
    #[test]
    fn every_shape_cut_small_loads_and_runs() {
        for full in SHAPES {
            let shape = SynthShape {
                n_layers: 2,
                vocab: 1024,
                ffn_dim: 512,
                dim: 256 * full.n_kv_heads.min(2),
                n_heads: 2 * full.n_kv_heads.min(2),
                n_kv_heads: full.n_kv_heads.min(2),
                head_dim: full.head_dim.min(128),
                ..full
            };
            let (writer, _) = synth(&shape, FileType::Q4KM, 3).expect("synthesizes");
            let file =
                GgufFile::from_bytes(Path::new("synth.gguf"), writer.to_bytes()).expect("parses");
            assert_eq!(Some(file.is_synthetic()), Some(true), "{}", full.name);
            let config = LlamaConfig::from_gguf(&file).expect(full.name);
            let tokenizer = Tokenizer::from_gguf(&file).expect("tokenizer");
            let ids = tokenizer.encode("some text").expect("encodes");
            let options = LoadOptions {
                weights: None,
                threads: 1,
                placement: Default::default(),
            };
            let model = Llama::load(config, &file, options).expect(full.name);
            let mut cache = model.new_cache(32);
            let logits = model.forward(&ids, &mut cache, Logits::Last).expect("runs");
            assert!(logits.iter().all(|v| v.is_finite()), "{}", full.name);
        }
    }

    #[test]
    fn impossible_shapes_are_refused_with_the_part_named() {
        let cases = [
            (
                SynthShape {
                    n_layers: 0,
                    ..SHAPES[0]
                },
                "layers must be at least 1",
            ),
            (
                SynthShape {
                    n_heads: 30,
                    ..SHAPES[0]
                },
                "30 query heads",
            ),
            (
                SynthShape {
                    dim: 1000,
                    ..SHAPES[0]
                },
                "width of 1000",
            ),
        ];
        for (shape, want) in cases {
            let Err(err) = synth(&shape, FileType::Q8_0, 1) else {
                panic!("{want}: accepted");
            };
            assert!(err.to_string().contains(want), "{err}");
        }
    }

    #[test]
    fn shapes_are_named_and_unknown_ones_refused() {
        assert_eq!(
            "llama-3.1-8b".parse::<SynthShape>().map(|s| s.dim),
            Ok(4096)
        );
        let err = "llama-9".parse::<SynthShape>().unwrap_err();
        assert!(err.contains("llama-3.2-1b"), "{err}");
    }
}
