//! llama-quantize's file types and the type each tensor of a file gets in one, as llama.cpp's
//! `llama_tensor_get_type` (`src/llama-quant.cpp`) chooses it without an importance matrix: the
//! mix's rules for `attn_v`, `ffn_down`, the output head and tied embeddings, then the fallback when a
//! row is not whole blocks of 256.

use std::{cmp::Ordering, fmt, path::Path, str::FromStr};

use crate::{
    error::{Error, Result},
    format::gguf::{GgufFile, MetaValue},
    quant::GgmlType,
    weights::WeightType,
};

/// A `llama-quantize` file type (llama.cpp's `llama_ftype`) that Strata can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// Every tensor that may be converted as F32.
    AllF32,
    /// F16.
    F16,
    /// bfloat16.
    Bf16,
    /// Q4_0, the output head Q6_K.
    Q4_0,
    /// Q4_1, the output head Q6_K.
    Q4_1,
    /// Q5_0, the output head Q6_K.
    Q5_0,
    /// Q5_1, the output head Q6_K.
    Q5_1,
    /// Q8_0 throughout.
    Q8_0,
    /// Q4_K, the first four `attn_v` and the first eighth of `ffn_down` Q5_K.
    Q4KS,
    /// Q4_K, half of `attn_v` and `ffn_down` Q6_K.
    Q4KM,
    /// Q5_K.
    Q5KS,
    /// Q5_K, half of `attn_v` and `ffn_down` Q6_K.
    Q5KM,
    /// Q6_K.
    Q6K,
}

impl FileType {
    /// Every file type, in llama.cpp's numbering order.
    pub const ALL: [FileType; 13] = [
        Self::AllF32,
        Self::F16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q8_0,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q4KS,
        Self::Q4KM,
        Self::Q5KS,
        Self::Q5KM,
        Self::Q6K,
        Self::Bf16,
    ];

    /// The file type whose tensors are all of one runtime type (the K-quants' small mixes).
    pub fn holding(kind: WeightType) -> Self {
        match kind {
            WeightType::F32 => Self::AllF32,
            WeightType::F16 => Self::F16,
            WeightType::Bf16 => Self::Bf16,
            WeightType::Q8_0 => Self::Q8_0,
            WeightType::Q4_0 => Self::Q4_0,
            WeightType::Q4_1 => Self::Q4_1,
            WeightType::Q5_0 => Self::Q5_0,
            WeightType::Q5_1 => Self::Q5_1,
            WeightType::Q4K => Self::Q4KS,
            WeightType::Q5K => Self::Q5KS,
            WeightType::Q6K => Self::Q6K,
        }
    }

    /// llama.cpp's `llama_ftype` number, written as `general.file_type`.
    pub fn id(self) -> u32 {
        match self {
            Self::AllF32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q8_0 => 7,
            Self::Q5_0 => 8,
            Self::Q5_1 => 9,
            Self::Q4KS => 14,
            Self::Q4KM => 15,
            Self::Q5KS => 16,
            Self::Q5KM => 17,
            Self::Q6K => 18,
            Self::Bf16 => 32,
        }
    }

    /// The lowercase name used on the command line (`q5_k_m`).
    pub fn name(self) -> &'static str {
        match self {
            Self::AllF32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
            Self::Q4_0 => "q4_0",
            Self::Q4_1 => "q4_1",
            Self::Q5_0 => "q5_0",
            Self::Q5_1 => "q5_1",
            Self::Q8_0 => "q8_0",
            Self::Q4KS => "q4_k_s",
            Self::Q4KM => "q4_k_m",
            Self::Q5KS => "q5_k_s",
            Self::Q5KM => "q5_k_m",
            Self::Q6K => "q6_k",
        }
    }

    /// llama.cpp's `llama_ftype_get_default_type`: the type of the tensors no rule singles out.
    pub fn default_type(self) -> GgmlType {
        match self {
            Self::AllF32 => GgmlType::F32,
            Self::F16 => GgmlType::F16,
            Self::Bf16 => GgmlType::BF16,
            Self::Q4_0 => GgmlType::Q4_0,
            Self::Q4_1 => GgmlType::Q4_1,
            Self::Q5_0 => GgmlType::Q5_0,
            Self::Q5_1 => GgmlType::Q5_1,
            Self::Q8_0 => GgmlType::Q8_0,
            Self::Q4KS | Self::Q4KM => GgmlType::Q4K,
            Self::Q5KS | Self::Q5KM => GgmlType::Q5K,
            Self::Q6K => GgmlType::Q6K,
        }
    }
}

impl fmt::Display for FileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FileType {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|t| t.name() == lower)
            .ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|t| t.name()).collect();
                format!(
                    "unknown file type {s:?} (expected one of {})",
                    known.join(", ")
                )
            })
    }
}

/// What happens to one tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorPlan {
    /// The tensor's name.
    pub name: String,
    /// Its dimensions as written: fastest-varying first, trailing ones dropped as ggml does.
    pub dims: Vec<u64>,
    /// Its type in the input.
    pub from: GgmlType,
    /// Its type in the output (`from` when it is copied as is).
    pub to: GgmlType,
}

impl TensorPlan {
    /// Whether the tensor is dequantized and quantized again (rather than copied).
    pub fn converts(&self) -> bool {
        self.from != self.to
    }
}

/// The model facts the type rules read from the metadata.
#[derive(Debug, Clone)]
struct ModelFacts {
    arch: String,
    n_layer: usize,
    n_expert: u64,
    is_70b: bool,
}

impl ModelFacts {
    /// The facts from metadata read through `meta`; `origin` names the file in errors.
    fn read<'m>(origin: &Path, meta: impl Fn(&str) -> Option<&'m MetaValue>) -> Result<Self> {
        let missing = |key: &str| Error::model(origin, format!("metadata {key} is missing"));
        let arch = meta("general.architecture")
            .and_then(MetaValue::as_str)
            .ok_or_else(|| missing("general.architecture"))?
            .to_owned();
        let key = |name: &str| format!("{arch}.{name}");
        let n_layer = meta(&key("block_count"))
            .and_then(MetaValue::as_u64)
            .ok_or_else(|| missing(&key("block_count")))?;
        let n_layer = usize::try_from(n_layer)
            .map_err(|_| Error::model(origin, format!("absurd block count {n_layer}")))?;
        let optional = |name: &str| meta(&key(name)).and_then(MetaValue::as_u64);
        let n_expert = optional("expert_count").unwrap_or(0);
        let n_head = optional("attention.head_count").unwrap_or(0);
        let n_head_kv = optional("attention.head_count_kv").unwrap_or(n_head);
        // The architectures whose loaders call an 80-layer (68 for jais2) model 70B.
        let is_70b = match arch.as_str() {
            "llama" => n_expert != 8 && n_layer == 80 && n_head != n_head_kv,
            "qwen2" | "olmo" | "deci" => n_layer == 80,
            "jais2" => n_layer == 68,
            _ => false,
        };
        Ok(Self {
            arch,
            n_layer,
            n_expert,
            is_70b,
        })
    }

    fn is_falcon(&self) -> bool {
        self.arch == "falcon"
    }
}

/// llama.cpp's `tensor_category`: the broad role of a tensor, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Category {
    TokenEmbd,
    AttentionQ,
    AttentionV,
    AttentionK,
    AttentionQkv,
    AttentionKvB,
    AttentionOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

impl Category {
    /// llama.cpp's `tensor_get_category`, in its order of tests.
    fn of(name: &str) -> Self {
        if name == "output.weight" {
            return Self::Output;
        }
        if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
            return Self::TokenEmbd;
        }
        let by_part = [
            ("attn_qkv.weight", Self::AttentionQkv),
            ("attn_kv_b.weight", Self::AttentionKvB),
            ("attn_v.weight", Self::AttentionV),
            ("attn_k.weight", Self::AttentionK),
            ("attn_q.weight", Self::AttentionQ),
            ("attn_output.weight", Self::AttentionOutput),
            ("ffn_up", Self::FfnUp),
            ("ffn_gate", Self::FfnGate),
            ("ffn_down", Self::FfnDown),
        ];
        by_part
            .into_iter()
            .find(|(part, _)| name.contains(part))
            .map_or(Self::Other, |(_, category)| category)
    }

    /// The tensors that llama.cpp counts and treats as `attn_v`.
    fn is_attn_v(self) -> bool {
        matches!(
            self,
            Self::AttentionV | Self::AttentionQkv | Self::AttentionKvB
        )
    }
}

/// Parts of names that llama.cpp never quantizes (small or sensitive tensors).
const NEVER_QUANTIZED: [&str; 34] = [
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
];

/// llama.cpp's `tensor_allows_quantization`: matrices (two or more dimensions) named `*weight`,
/// except norms, positional and token-type embeddings, and the small tensors it lists.
fn allows_quantization(name: &str, n_dims: usize) -> bool {
    n_dims >= 2
        && name.ends_with("weight")
        && name != "position_embd.weight"
        && name != "token_types.weight"
        && !name.contains("mm.a.code_embd")
        && !NEVER_QUANTIZED.iter().any(|part| name.contains(part))
}

/// ggml's `ggml_n_dims`: the dimensions up to the last one larger than 1 (at least one).
fn ggml_n_dims(dims: &[u64]) -> usize {
    dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1)
}

/// llama.cpp's `use_more_bits`: the first and last eighths of the layers and every third between.
fn use_more_bits(i_layer: usize, n_layers: usize) -> bool {
    let (i, n) = (i_layer as i64, n_layers as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The layer number of `blk.N.*` tensors, as `sscanf(name, "blk.%d.")` reads it.
fn layer_of(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("blk.")?;
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    rest[..digits].parse().ok()
}

/// llama.cpp's `weight_name_comparer`: by layer (tensors outside `blk.N.` first), then by name.
fn weight_order(a: &str, b: &str) -> Ordering {
    let layer = |name| layer_of(name).unwrap_or(-1);
    layer(a).cmp(&layer(b)).then_with(|| a.cmp(b))
}

/// The state llama.cpp's type rules carry from tensor to tensor (`quantize_state_impl`).
struct TypeRules<'a> {
    ftype: FileType,
    facts: &'a ModelFacts,
    has_tied_embeddings: bool,
    n_attention_wv: usize,
    i_attention_wv: usize,
    i_ffn_down: usize,
}

impl TypeRules<'_> {
    /// llama.cpp's `llama_tensor_get_type` for one tensor, in file order.
    fn target(
        &mut self,
        name: &str,
        dims: &[u64],
        current: GgmlType,
    ) -> std::result::Result<GgmlType, String> {
        if !allows_quantization(name, ggml_n_dims(dims)) {
            return Ok(current);
        }
        let default = self.ftype.default_type();
        if !default.is_quantized() {
            return Ok(default);
        }
        let chosen = self.mix_rules(name, dims[0], default)?;
        Ok(fallback(dims[0], chosen))
    }

    /// llama.cpp's `llama_tensor_get_type_impl`, for the file types of [`FileType`].
    fn mix_rules(
        &mut self,
        name: &str,
        columns: u64,
        default: GgmlType,
    ) -> std::result::Result<GgmlType, String> {
        let category = Category::of(name);
        let (ftype, facts) = (self.ftype, self.facts);
        let mut new_type = default;
        if category == Category::Output
            || (self.has_tied_embeddings && category == Category::TokenEmbd)
        {
            if facts.is_falcon() || !columns.is_multiple_of(default.block_size() as u64) {
                new_type = GgmlType::Q8_0;
            } else if new_type != GgmlType::Q8_0 {
                new_type = GgmlType::Q6K;
            }
        } else if category == Category::TokenEmbd {
            // No rule for these file types.
        } else if category.is_attn_v() {
            if matches!(ftype, FileType::Q4KM | FileType::Q5KM)
                && use_more_bits(self.i_attention_wv, self.n_attention_wv)
            {
                new_type = GgmlType::Q6K;
            } else if ftype == FileType::Q4KS && self.i_attention_wv < 4 {
                new_type = GgmlType::Q5K;
            }
            if facts.is_70b && new_type == GgmlType::Q4K {
                new_type = GgmlType::Q5K;
            }
            if facts.n_expert == 8 {
                new_type = GgmlType::Q8_0;
            }
            self.i_attention_wv += 1;
        } else if category == Category::AttentionK {
            if facts.n_expert == 8 {
                new_type = GgmlType::Q8_0;
            }
        } else if category == Category::FfnDown {
            let (i_layer, n_layer) = self.ffn_down_layer(name)?;
            let more_bits = use_more_bits(i_layer, n_layer);
            match ftype {
                FileType::Q4KM if facts.is_falcon() => {
                    new_type = if i_layer < n_layer / 16 {
                        GgmlType::Q6K
                    } else if more_bits {
                        GgmlType::Q5K
                    } else {
                        GgmlType::Q4K
                    };
                }
                FileType::Q4KM | FileType::Q5KM if more_bits => new_type = GgmlType::Q6K,
                FileType::Q4KS if !facts.is_falcon() && i_layer < n_layer / 8 => {
                    new_type = GgmlType::Q5K;
                }
                _ => {}
            }
            self.i_ffn_down += 1;
        } else if category == Category::AttentionOutput
            && !facts.is_falcon()
            && facts.n_expert == 8
            && matches!(ftype, FileType::Q4KS | FileType::Q4KM)
        {
            new_type = GgmlType::Q5K;
        }
        Ok(new_type)
    }

    /// llama.cpp's `layer_info` for `ffn_down`: the running count, or the layer in the name for
    /// mixture-of-experts models (whose experts are not stored in layer order).
    fn ffn_down_layer(&self, name: &str) -> std::result::Result<(usize, usize), String> {
        let n_layer = self.facts.n_layer;
        if self.facts.n_expert <= 1 {
            return Ok((self.i_ffn_down, n_layer));
        }
        match layer_of(name).and_then(|l| usize::try_from(l).ok()) {
            Some(layer) if layer < n_layer => Ok((layer, n_layer)),
            _ => Err(format!(
                "tensor {name}: no layer below {n_layer} in its name"
            )),
        }
    }
}

/// ggml types that are blocks of quantized values.
/// llama.cpp's `tensor_type_fallback`: a row that is not whole blocks of the chosen type takes the
/// 32-wide type of about as many bits, and F16 when even that does not fit.
pub fn fallback(columns: u64, chosen: GgmlType) -> GgmlType {
    let fits = |kind: GgmlType| columns.is_multiple_of(kind.block_size() as u64);
    if fits(chosen) {
        return chosen;
    }
    let smaller = match chosen {
        GgmlType::Q4K => GgmlType::Q5_0,
        GgmlType::Q5K => GgmlType::Q5_1,
        GgmlType::Q6K => GgmlType::Q8_0,
        other => other,
    };
    if fits(smaller) {
        smaller
    } else {
        GgmlType::F16
    }
}

/// The type every tensor of `file` gets as `ftype`, in llama-quantize's output order.
///
/// # Errors
/// When the metadata lacks the architecture or block count, or a mixture-of-experts tensor's name
/// has no layer.
pub fn plan(file: &GgufFile, ftype: FileType) -> Result<Vec<TensorPlan>> {
    let tensors: Vec<_> = file
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t.dims.as_slice(), t.kind))
        .collect();
    plan_tensors(file.path(), |key| file.meta(key), &tensors, ftype)
}

/// [`plan`] for tensors given as (name, dims, type), with the metadata read through `meta` (a
/// file being written has no [`GgufFile`] yet); `origin` names it in errors.
///
/// # Errors
/// As [`plan`].
pub fn plan_tensors<'m>(
    origin: &Path,
    meta: impl Fn(&str) -> Option<&'m MetaValue>,
    tensors: &[(&str, &[u64], GgmlType)],
    ftype: FileType,
) -> Result<Vec<TensorPlan>> {
    let facts = ModelFacts::read(origin, meta)?;
    let mut tensors: Vec<_> = tensors.to_vec();
    tensors.sort_by(|a, b| weight_order(a.0, b.0));
    let mut rules = TypeRules {
        ftype,
        facts: &facts,
        has_tied_embeddings: !tensors.iter().any(|t| t.0 == "output.weight"),
        n_attention_wv: tensors
            .iter()
            .filter(|t| Category::of(t.0).is_attn_v())
            .count(),
        i_attention_wv: 0,
        i_ffn_down: 0,
    };
    tensors
        .into_iter()
        .map(|(name, dims, kind)| {
            let to = rules
                .target(name, dims, kind)
                .map_err(|problem| Error::model(origin, problem))?;
            Ok(TensorPlan {
                name: name.to_owned(),
                dims: dims[..ggml_n_dims(dims)].to_vec(),
                from: kind,
                to,
            })
        })
        .collect()
}

/// Counts of output tensors by type, for reports (`Q5_K: 27, Q5_1: 81, ...`).
pub fn type_counts(tensors: &[TensorPlan]) -> Vec<(GgmlType, usize)> {
    let mut counts: Vec<(GgmlType, usize)> = Vec::new();
    for t in tensors {
        match counts.iter_mut().find(|(kind, _)| *kind == t.to) {
            Some((_, n)) => *n += 1,
            None => counts.push((t.to, 1)),
        }
    }
    counts.sort_by_key(|&(kind, _)| kind.id());
    counts
}

#[cfg(test)]
pub(crate) mod tests;
