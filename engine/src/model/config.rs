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

/// Validated model hyperparameters.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LlamaConfig {
    /// Architecture name as the file gives it (`llama`, `qwen2`).
    pub architecture: String,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Hidden width.
    pub dim: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_heads`).
    pub n_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Feed-forward inner width.
    pub ffn_dim: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// RoPE base frequency.
    pub rope_theta: f32,
    /// RoPE pairing.
    pub rope_style: RopeStyle,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Trained context length.
    pub context_length: usize,
}

impl LlamaConfig {
    /// Reads the hyperparameters from GGUF metadata (`{arch}.block_count` etc.).
    ///
    /// # Errors
    /// When a key is missing or the values are inconsistent.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let arch = file.meta_str("general.architecture")?.to_string();
        let rope_style = match arch.as_str() {
            "llama" => RopeStyle::Interleaved,
            "qwen2" => RopeStyle::Neox,
            other => {
                return Err(Error::model(
                    file.path(),
                    format!("architecture {other:?} is not supported (supported: llama, qwen2)"),
                ));
            }
        };
        let key = |k: &str| format!("{arch}.{k}");
        let usize_of = |k: &str| -> Result<usize> {
            let v = file.meta_u64(&key(k))?;
            usize::try_from(v)
                .map_err(|_| Error::model(file.path(), format!("{} = {v} is too large", key(k))))
        };
        let dim = usize_of("embedding_length")?;
        let n_heads = usize_of("attention.head_count")?;
        let n_kv_heads = match file.meta(&key("attention.head_count_kv")) {
            Some(_) => usize_of("attention.head_count_kv")?,
            None => n_heads,
        };
        let head_dim = dim.checked_div(n_heads).unwrap_or(0);
        let vocab_size = match file
            .meta("tokenizer.ggml.tokens")
            .and_then(|v| v.as_array())
        {
            Some(tokens) => tokens.len(),
            None => usize_of("vocab_size")?,
        };
        let config = Self {
            n_layers: usize_of("block_count")?,
            dim,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim: usize_of("feed_forward_length")?,
            vocab_size,
            rope_theta: file
                .meta(&key("rope.freq_base"))
                .and_then(|v| v.as_f64())
                .unwrap_or(10_000.0) as f32,
            rope_style,
            rms_eps: file.meta_f64(&key("attention.layer_norm_rms_epsilon"))? as f32,
            context_length: usize_of("context_length")?,
            architecture: arch,
        };
        config
            .validate()
            .map_err(|problem| Error::model(file.path(), problem))?;
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
        if !self.dim.is_multiple_of(self.n_heads) || self.head_dim * self.n_heads != self.dim {
            return Err(format!(
                "embedding length {} is not divisible by {} heads",
                self.dim, self.n_heads
            ));
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
        Ok(())
    }

    /// Width of the key/value projections.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}
