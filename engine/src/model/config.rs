//! The hyperparameters of a Llama-family model, validated once from GGUF metadata or config.json.

use crate::{
    error::{Error, Result},
    format::gguf::GgufFile,
};

/// How rotary position embedding pairs dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeStyle {
    /// Adjacent pairs `(x[2i], x[2i+1])`: GGUF's layout for Llama (Q/K rows permuted at conversion).
    Interleaved,
    /// Halves `(x[i], x[i + d/2])`: Hugging Face's layout, and GGUF's for Qwen2.
    Neox,
}

/// The architectures [`LlamaConfig::from_gguf`] reads, as `general.architecture` names them.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &["llama", "qwen2", "qwen3", "gemma3"];

/// The gated feed-forward's activation of the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// `x * sigmoid(x)` (SwiGLU).
    #[default]
    Silu,
    /// GELU in its tanh form, as ggml's `ggml_gelu` computes it (GeGLU).
    GeluTanh,
}

/// Layers that attend only to the most recent positions, with their own RoPE base.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SlidingWindow {
    /// Positions a query sees: its own and the `size - 1` before it (a query at `p` sees `p'` when
    /// `p - p' < size`).
    pub size: usize,
    /// Per layer: whether it is a sliding-window layer (the others attend to every position).
    pub layers: Vec<bool>,
    /// RoPE base frequency of the sliding-window layers.
    pub rope_theta: f32,
}

/// Validated model hyperparameters.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LlamaConfig {
    /// Architecture name as the file gives it (one of [`SUPPORTED_ARCHITECTURES`]).
    pub architecture: String,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Hidden width.
    pub dim: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_heads`).
    pub n_kv_heads: usize,
    /// Width of one head (not always `dim / n_heads`).
    pub head_dim: usize,
    /// Feed-forward inner width.
    pub ffn_dim: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// RoPE base frequency (of the global layers when some use a sliding window).
    pub rope_theta: f32,
    /// Linear RoPE scaling factor of the global layers: their positions are divided by it.
    #[serde(default)]
    pub rope_scaling: Option<f32>,
    /// RoPE pairing.
    pub rope_style: RopeStyle,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Trained context length.
    pub context_length: usize,
    /// Per-head RMSNorm of queries and keys before RoPE (`attn_q_norm`, `attn_k_norm`).
    #[serde(default)]
    pub qk_norm: bool,
    /// RMSNorm of the attention and feed-forward outputs before their residual adds
    /// (`post_attention_norm`, `post_ffw_norm`).
    #[serde(default)]
    pub post_norms: bool,
    /// The feed-forward gate's activation.
    #[serde(default)]
    pub activation: Activation,
    /// Factor of the token embeddings as they enter the first block.
    #[serde(default)]
    pub embedding_scale: Option<f32>,
    /// Factor of the queries after RoPE, the scores then unscaled; `None` scales the scores by
    /// `1 / sqrt(head_dim)` instead.
    #[serde(default)]
    pub query_scale: Option<f32>,
    /// Sliding-window layers, if any.
    #[serde(default)]
    pub sliding_window: Option<SlidingWindow>,
    /// `c` of the output's soft cap `c * tanh(logit / c)`, if any.
    #[serde(default)]
    pub final_logit_softcap: Option<f32>,
}

/// What an architecture computes beyond the Llama block, as llama.cpp builds its graph.
struct ArchitectureForm {
    rope_style: RopeStyle,
    qk_norm: bool,
    post_norms: bool,
    activation: Activation,
    gemma: bool,
}

impl ArchitectureForm {
    fn of(name: &str) -> Option<Self> {
        let plain = Self {
            rope_style: RopeStyle::Neox,
            qk_norm: false,
            post_norms: false,
            activation: Activation::Silu,
            gemma: false,
        };
        Some(match name {
            "llama" => Self {
                rope_style: RopeStyle::Interleaved,
                ..plain
            },
            "qwen2" => plain,
            "qwen3" => Self {
                qk_norm: true,
                ..plain
            },
            "gemma3" => Self {
                qk_norm: true,
                post_norms: true,
                activation: Activation::GeluTanh,
                gemma: true,
                ..plain
            },
            _ => return None,
        })
    }
}

/// Gemma 3's default: five sliding-window layers, then one global layer.
const GEMMA3_SWA_PATTERN: u64 = 6;
/// llama.cpp's RoPE base of sliding-window layers when the file does not give one.
const DEFAULT_SWA_ROPE_THETA: f64 = 10_000.0;
/// llama.cpp's Gemma 3 27B (62 blocks) scales queries by its width per head, not its head size.
const GEMMA3_27B_BLOCKS: usize = 62;

impl LlamaConfig {
    /// Reads the hyperparameters from GGUF metadata (`{arch}.block_count` etc.).
    ///
    /// # Errors
    /// When the architecture is not supported, a key is missing or the values are inconsistent.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let arch = file.meta_str("general.architecture")?.to_string();
        let bad = |problem: String| Error::model(file.path(), problem);
        let form = ArchitectureForm::of(&arch).ok_or_else(|| {
            bad(format!(
                "architecture {arch:?} is not supported (supported: {})",
                SUPPORTED_ARCHITECTURES.join(", ")
            ))
        })?;
        let meta = Meta { file, arch: &arch };
        let dim = meta.usize_of("embedding_length")?;
        let n_heads = meta.usize_of("attention.head_count")?;
        let n_kv_heads = meta
            .optional_usize("attention.head_count_kv")?
            .unwrap_or(n_heads);
        let head_dim = meta.head_dim(dim, n_heads)?;
        let vocab_size = match file
            .meta("tokenizer.ggml.tokens")
            .and_then(|v| v.as_array())
        {
            Some(tokens) => tokens.len(),
            None => meta.usize_of("vocab_size")?,
        };
        let n_layers = meta.usize_of("block_count")?;
        let sliding_window = if form.gemma {
            meta.sliding_window(n_layers)?
        } else {
            None
        };
        let (embedding_scale, query_scale) = if form.gemma {
            let per_head = if n_layers == GEMMA3_27B_BLOCKS {
                dim.checked_div(n_heads).unwrap_or(0)
            } else {
                head_dim
            };
            (
                Some((dim as f32).sqrt()),
                Some(1.0 / (per_head as f32).sqrt()),
            )
        } else {
            (None, None)
        };
        let config = Self {
            n_layers,
            dim,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim: meta.usize_of("feed_forward_length")?,
            vocab_size,
            rope_theta: meta.optional_f64("rope.freq_base").unwrap_or(10_000.0) as f32,
            rope_scaling: meta.rope_scaling()?,
            rope_style: form.rope_style,
            rms_eps: file.meta_f64(&meta.key("attention.layer_norm_rms_epsilon"))? as f32,
            context_length: meta.usize_of("context_length")?,
            qk_norm: form.qk_norm,
            post_norms: form.post_norms,
            activation: form.activation,
            embedding_scale,
            query_scale,
            sliding_window,
            final_logit_softcap: meta
                .optional_f64("final_logit_softcapping")
                .map(|c| c as f32)
                .filter(|&c| c != 0.0),
            architecture: arch.clone(),
        };
        config.validate().map_err(bad)?;
        Ok(config)
    }

    /// Checks that the shapes fit together.
    ///
    /// # Errors
    /// A description of the first inconsistency.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let positive = [
            ("block count", self.n_layers),
            ("embedding length", self.dim),
            ("head count", self.n_heads),
            ("kv head count", self.n_kv_heads),
            ("feed-forward length", self.ffn_dim),
            ("vocabulary size", self.vocab_size),
            ("context length", self.context_length),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} is zero"));
        }
        if self.head_dim == 0 {
            return Err("head size is zero".into());
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(format!(
                "{} heads are not a multiple of {} kv heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(format!(
                "head size {} is odd; RoPE needs pairs",
                self.head_dim
            ));
        }
        if self.n_layers > 1024
            || self.dim > 1 << 16
            || self.head_dim > 1 << 12
            || self.n_heads > 1 << 10
            || self.vocab_size > 1 << 22
            || self.ffn_dim > 1 << 18
        {
            return Err("absurd model dimensions".into());
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(format!(
                "RoPE base {} is not a positive number",
                self.rope_theta
            ));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return Err(format!("RMSNorm epsilon {} is invalid", self.rms_eps));
        }
        if let Some(factor) = self.rope_scaling.filter(|f| !(f.is_finite() && *f > 0.0)) {
            return Err(format!(
                "RoPE scaling factor {factor} is not a positive number"
            ));
        }
        for (name, value) in [
            ("embedding scale", self.embedding_scale),
            ("query scale", self.query_scale),
            ("final logit soft cap", self.final_logit_softcap),
        ] {
            if let Some(v) = value.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return Err(format!("{name} {v} is not a positive number"));
            }
        }
        if let Some(window) = &self.sliding_window {
            window.validate(self.n_layers)?;
        }
        Ok(())
    }

    /// Width of the query projection (and of the attention output), `n_heads * head_dim`.
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// The sliding window of layer `layer`, if it is a sliding-window layer.
    pub fn window_of(&self, layer: usize) -> Option<usize> {
        let window = self.sliding_window.as_ref()?;
        window
            .layers
            .get(layer)
            .copied()
            .unwrap_or(false)
            .then_some(window.size)
    }

    /// Width of the key/value projections.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

impl SlidingWindow {
    fn validate(&self, n_layers: usize) -> std::result::Result<(), String> {
        if self.size == 0 {
            return Err("sliding window of zero positions".into());
        }
        if self.layers.len() != n_layers {
            return Err(format!(
                "sliding-window pattern names {} layers, the model has {n_layers}",
                self.layers.len()
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(format!(
                "sliding-window RoPE base {} is not a positive number",
                self.rope_theta
            ));
        }
        Ok(())
    }
}

/// The `{arch}.*` metadata of one file.
struct Meta<'a> {
    file: &'a GgufFile,
    arch: &'a str,
}

impl Meta<'_> {
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    fn bad(&self, problem: String) -> Error {
        Error::model(self.file.path(), problem)
    }

    fn usize_of(&self, k: &str) -> Result<usize> {
        let v = self.file.meta_u64(&self.key(k))?;
        usize::try_from(v).map_err(|_| self.bad(format!("{} = {v} is too large", self.key(k))))
    }

    fn optional_usize(&self, k: &str) -> Result<Option<usize>> {
        match self.file.meta(&self.key(k)) {
            Some(_) => self.usize_of(k).map(Some),
            None => Ok(None),
        }
    }

    fn optional_f64(&self, k: &str) -> Option<f64> {
        self.file.meta(&self.key(k)).and_then(|v| v.as_f64())
    }

    /// `attention.key_length` when given (it must equal `value_length`), else `dim / n_heads`; a
    /// rotary dimension count, when given, must cover the whole head.
    fn head_dim(&self, dim: usize, n_heads: usize) -> Result<usize> {
        let keys = self.optional_usize("attention.key_length")?;
        let values = self.optional_usize("attention.value_length")?;
        let head_dim = match keys {
            Some(k) => k,
            None if n_heads > 0 && dim.is_multiple_of(n_heads) => dim / n_heads,
            None => {
                return Err(self.bad(format!(
                    "embedding length {dim} is not divisible by {n_heads} heads and {} is missing",
                    self.key("attention.key_length")
                )));
            }
        };
        if let Some(v) = values.filter(|&v| v != head_dim) {
            return Err(self.bad(format!(
                "value heads of {v} differ from key heads of {head_dim}; the engine needs them equal"
            )));
        }
        if let Some(rot) = self
            .optional_usize("rope.dimension_count")?
            .filter(|&r| r != head_dim)
        {
            return Err(self.bad(format!(
                "RoPE over {rot} of {head_dim} head dimensions (partial rotary) is not supported"
            )));
        }
        Ok(head_dim)
    }

    /// Linear scaling from `rope.scaling.type` and `rope.scaling.factor` (or the older
    /// `rope.scale_linear`), as llama.cpp reads them; other scaling types are refused.
    fn rope_scaling(&self) -> Result<Option<f32>> {
        let kind = self.file.meta(&self.key("rope.scaling.type"));
        let kind = match kind {
            None => "linear",
            Some(v) => v.as_str().ok_or_else(|| {
                self.bad(format!("{} is not a string", self.key("rope.scaling.type")))
            })?,
        };
        if !matches!(kind, "none" | "linear") {
            return Err(self.bad(format!(
                "RoPE scaling {kind:?} is not supported (supported: none, linear)"
            )));
        }
        let factor = self
            .optional_f64("rope.scaling.factor")
            .or_else(|| self.optional_f64("rope.scale_linear"))
            .filter(|&f| f != 0.0 && f != 1.0);
        Ok(factor.map(|f| f as f32))
    }

    /// Gemma 3's sliding window: `attention.sliding_window` positions (none when absent or zero),
    /// the layers from `attention.sliding_window_pattern` (one flag per layer, or a period `n`
    /// whose last layer of every `n` is global; 6 when absent), the RoPE base from
    /// `rope.freq_base_swa` (10000 when absent).
    fn sliding_window(&self, n_layers: usize) -> Result<Option<SlidingWindow>> {
        let size = self
            .optional_usize("attention.sliding_window")?
            .unwrap_or(0);
        if size == 0 {
            return Ok(None);
        }
        let pattern_key = self.key("attention.sliding_window_pattern");
        let layers = match self.file.meta(&pattern_key) {
            Some(value) => match value.as_array() {
                Some(flags) => {
                    let mut layers = flags
                        .iter()
                        .map(|f| f.as_bool())
                        .collect::<Option<Vec<bool>>>()
                        .ok_or_else(|| {
                            self.bad(format!("{pattern_key} holds a non-boolean item"))
                        })?;
                    if layers.len() > n_layers {
                        return Err(self.bad(format!(
                            "{pattern_key} names {} layers, the model has {n_layers}",
                            layers.len()
                        )));
                    }
                    // Layers the flags do not reach are global, as llama.cpp leaves them.
                    layers.resize(n_layers, false);
                    layers
                }
                None => {
                    let period = value.as_u64().ok_or_else(|| {
                        self.bad(format!("{pattern_key} is neither a number nor flags"))
                    })?;
                    periodic_pattern(period, n_layers)
                }
            },
            None => periodic_pattern(GEMMA3_SWA_PATTERN, n_layers),
        };
        Ok(Some(SlidingWindow {
            size,
            layers,
            rope_theta: self
                .optional_f64("rope.freq_base_swa")
                .unwrap_or(DEFAULT_SWA_ROPE_THETA) as f32,
        }))
    }
}

/// llama.cpp's periodic pattern: of every `period` layers the last is global, the others slide; a
/// period of 0 makes every layer slide.
fn periodic_pattern(period: u64, n_layers: usize) -> Vec<bool> {
    (0..n_layers as u64)
        .map(|il| period == 0 || il % period < period - 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::format::{gguf::MetaValue, gguf_writer::GgufWriter};

    /// Gemma 3 270M's metadata (no tensors), with `edit` applied.
    fn gemma3_270m(edit: impl FnOnce(&mut GgufWriter)) -> Result<LlamaConfig> {
        let mut w = GgufWriter::new();
        let u32_of = MetaValue::U32;
        w.metadata("general.architecture", MetaValue::String("gemma3".into()))
            .metadata("gemma3.context_length", u32_of(32_768))
            .metadata("gemma3.embedding_length", u32_of(640))
            .metadata("gemma3.block_count", u32_of(18))
            .metadata("gemma3.feed_forward_length", u32_of(2048))
            .metadata("gemma3.attention.head_count", u32_of(4))
            .metadata("gemma3.attention.head_count_kv", u32_of(1))
            .metadata("gemma3.attention.key_length", u32_of(256))
            .metadata("gemma3.attention.value_length", u32_of(256))
            .metadata(
                "gemma3.attention.layer_norm_rms_epsilon",
                MetaValue::F32(1e-6),
            )
            .metadata("gemma3.rope.freq_base", MetaValue::F32(1_000_000.0))
            .metadata("gemma3.attention.sliding_window", u32_of(512))
            .metadata("gemma3.vocab_size", u32_of(262_144));
        edit(&mut w);
        let file = GgufFile::from_bytes(Path::new("gemma.gguf"), w.to_bytes())?;
        LlamaConfig::from_gguf(&file)
    }

    fn error_of(result: Result<LlamaConfig>) -> String {
        result.expect_err("refused").to_string()
    }

    #[test]
    fn gemma3_reads_as_llama_cpp_sets_it_up() {
        let c = gemma3_270m(|_| {}).expect("config");
        assert_eq!(
            (c.dim, c.n_heads, c.n_kv_heads, c.head_dim),
            (640, 4, 1, 256)
        );
        assert_eq!((c.q_dim(), c.kv_dim()), (1024, 256));
        assert_eq!(c.rope_style, RopeStyle::Neox);
        assert!(c.qk_norm && c.post_norms);
        assert_eq!(c.activation, Activation::GeluTanh);
        assert_eq!(c.embedding_scale, Some(640f32.sqrt()));
        assert_eq!(c.query_scale, Some(1.0 / 16.0));
        assert_eq!((c.rope_theta, c.rope_scaling), (1_000_000.0, None));
        assert_eq!(c.final_logit_softcap, None);
        let window = c.sliding_window.as_ref().expect("sliding window");
        assert_eq!((window.size, window.rope_theta), (512, 10_000.0));
        let global: Vec<usize> = (0..18).filter(|&i| c.window_of(i).is_none()).collect();
        assert_eq!(global, [5, 11, 17], "every sixth layer is global");
        assert_eq!(c.window_of(0), Some(512));
    }

    #[test]
    fn gemma3_sliding_window_keys_change_the_layers_and_rope() {
        let c = gemma3_270m(|w| {
            w.metadata("gemma3.attention.sliding_window_pattern", MetaValue::U32(3))
                .metadata("gemma3.rope.freq_base_swa", MetaValue::F32(20_000.0));
        })
        .expect("config");
        let window = c.sliding_window.expect("sliding window");
        assert_eq!(window.rope_theta, 20_000.0);
        let global: Vec<usize> = (0..18).filter(|&i| !window.layers[i]).collect();
        assert_eq!(global, [2, 5, 8, 11, 14, 17]);

        let flags = (0..4).map(|i| MetaValue::Bool(i != 1)).collect();
        let c = gemma3_270m(|w| {
            w.metadata(
                "gemma3.attention.sliding_window_pattern",
                MetaValue::Array(flags),
            );
        })
        .expect("config");
        let window = c.sliding_window.expect("sliding window");
        let sliding: Vec<usize> = (0..18).filter(|&i| window.layers[i]).collect();
        assert_eq!(
            sliding,
            [0, 2, 3],
            "flags apply in order; layers past them are global"
        );

        let c = gemma3_270m(|w| {
            w.metadata("gemma3.attention.sliding_window", MetaValue::U32(0));
        })
        .expect("config");
        assert_eq!(c.sliding_window, None, "a zero window is no window");
    }

    #[test]
    fn gemma3_scaling_and_soft_cap_are_read() {
        let c = gemma3_270m(|w| {
            w.metadata(
                "gemma3.rope.scaling.type",
                MetaValue::String("linear".into()),
            )
            .metadata("gemma3.rope.scaling.factor", MetaValue::F32(8.0))
            .metadata("gemma3.final_logit_softcapping", MetaValue::F32(30.0));
        })
        .expect("config");
        assert_eq!(c.rope_scaling, Some(8.0));
        assert_eq!(c.final_logit_softcap, Some(30.0));
        let c = gemma3_270m(|w| {
            w.metadata("gemma3.block_count", MetaValue::U32(62));
        })
        .expect("config");
        assert_eq!(
            c.query_scale,
            Some(1.0 / 160f32.sqrt()),
            "llama.cpp scales the 27B's queries by width per head"
        );
    }

    #[test]
    fn unsupported_forms_are_named() {
        let message = error_of(gemma3_270m(|w| {
            w.metadata("general.architecture", MetaValue::String("gemma2".into()));
        }));
        assert!(
            message.contains("architecture \"gemma2\" is not supported")
                && message.contains("llama, qwen2, qwen3, gemma3"),
            "{message}"
        );
        let message = error_of(gemma3_270m(|w| {
            w.metadata("gemma3.rope.scaling.type", MetaValue::String("yarn".into()));
        }));
        assert!(
            message.contains("RoPE scaling \"yarn\" is not supported"),
            "{message}"
        );
        let message = error_of(gemma3_270m(|w| {
            w.metadata("gemma3.rope.dimension_count", MetaValue::U32(128));
        }));
        assert!(message.contains("partial rotary"), "{message}");
        let message = error_of(gemma3_270m(|w| {
            w.metadata("gemma3.attention.value_length", MetaValue::U32(128));
        }));
        assert!(message.contains("value heads of 128"), "{message}");
        let message = error_of(gemma3_270m(|w| {
            let flags = (0..19).map(|_| MetaValue::Bool(true)).collect();
            w.metadata(
                "gemma3.attention.sliding_window_pattern",
                MetaValue::Array(flags),
            );
        }));
        assert!(message.contains("names 19 layers"), "{message}");
    }

    #[test]
    fn qwen3_has_qk_norms_and_llama_keeps_its_form() {
        let as_arch = |arch: &str| {
            gemma3_270m(|w| {
                let meta: Vec<(String, MetaValue)> = [
                    "context_length",
                    "embedding_length",
                    "block_count",
                    "feed_forward_length",
                    "attention.head_count",
                    "attention.head_count_kv",
                    "attention.key_length",
                    "attention.value_length",
                    "attention.layer_norm_rms_epsilon",
                    "rope.freq_base",
                    "attention.sliding_window",
                    "vocab_size",
                ]
                .iter()
                .filter_map(|k| {
                    let value = w.remove_metadata(&format!("gemma3.{k}"))?;
                    Some((format!("{arch}.{k}"), value))
                })
                .collect();
                for (k, v) in meta {
                    w.metadata(k, v);
                }
                w.metadata("general.architecture", MetaValue::String(arch.into()));
            })
            .expect("config")
        };
        let qwen3 = as_arch("qwen3");
        assert!(qwen3.qk_norm && !qwen3.post_norms);
        assert_eq!(qwen3.rope_style, RopeStyle::Neox);
        assert_eq!(qwen3.activation, Activation::Silu);
        assert_eq!(
            (
                qwen3.sliding_window,
                qwen3.query_scale,
                qwen3.embedding_scale
            ),
            (None, None, None),
            "only Gemma reads a window and scales"
        );
        assert_eq!(qwen3.head_dim, 256, "key_length wins over width / heads");
        let llama = as_arch("llama");
        assert!(!llama.qk_norm && !llama.post_norms);
        assert_eq!(llama.rope_style, RopeStyle::Interleaved);
    }
}
