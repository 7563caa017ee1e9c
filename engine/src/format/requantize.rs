//! Requantizes a GGUF file to one of `llama-quantize`'s file types (Q4_K_M, Q5_K_M, Q8_0, ...).
//!
//! Each tensor's type is chosen as llama.cpp's `llama_tensor_get_type` (`src/llama-quant.cpp`)
//! chooses it without an importance matrix: the mix's rules for `attn_v`, `ffn_down`, the output
//! head and tied embeddings, then the fallback when a row is not whole blocks of 256. A tensor
//! already in its type is copied; the others are dequantized and quantized again with ggml's
//! reference quantizers. The output keeps llama-quantize's layout: the input's metadata in file
//! order with `general.quantization_version` and `general.file_type` set last, tensors ordered by
//! layer and then by name, so that the same input gives the same bytes as llama.cpp's tool.

use std::{
    cmp::Ordering,
    fmt,
    fs::{self, File},
    io::BufWriter,
    path::{Path, PathBuf},
    str::FromStr,
};

use rayon::prelude::*;

use crate::{
    error::{Error, Result},
    format::{
        gguf::{GgufFile, MetaValue},
        gguf_writer::GgufWriter,
    },
    quant::{self, GgmlType},
    weights::WeightType,
};

/// ggml's `GGML_QNT_VERSION`, written as `general.quantization_version`.
const QUANTIZATION_VERSION: u32 = 2;

/// Values dequantized and requantized per task, as llama-quantize's chunks (`32 * 512`).
const VALUES_PER_TASK: usize = 32 * 512;

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

/// What [`requantize_file`] wrote.
#[derive(Debug, Clone)]
pub struct Requantized {
    /// The output file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Every tensor, in output order.
    pub tensors: Vec<TensorPlan>,
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

/// `file` requantized to `ftype`, in memory, with the plan it followed.
///
/// # Errors
/// As [`plan`]; and when a tensor's bytes do not fit its type.
pub fn requantize(file: &GgufFile, ftype: FileType) -> Result<(GgufWriter, Vec<TensorPlan>)> {
    let tensors = plan(file, ftype)?;
    let mut writer = GgufWriter::new();
    for (key, value) in file.metadata_in_file_order() {
        writer.metadata(key, value.clone());
    }
    // As llama-quantize: the versions go last, the split keys of a sharded input go.
    for key in [
        "general.quantization_version",
        "general.file_type",
        "split.no",
        "split.count",
        "split.tensors.count",
    ] {
        writer.remove_metadata(key);
    }
    writer
        .metadata(
            "general.quantization_version",
            MetaValue::U32(QUANTIZATION_VERSION),
        )
        .metadata("general.file_type", MetaValue::U32(ftype.id()));
    for tensor in &tensors {
        let info = file
            .tensor(&tensor.name)
            .ok_or_else(|| Error::model(file.path(), format!("tensor {} vanished", tensor.name)))?;
        let data = file.tensor_data(info);
        let bytes = if tensor.converts() {
            convert_tensor(data, tensor).map_err(|e| match e {
                Error::Quantize { problem, .. } => {
                    Error::model(file.path(), format!("tensor {}: {problem}", tensor.name))
                }
                other => other,
            })?
        } else {
            data.to_vec()
        };
        writer.tensor(&tensor.name, &tensor.dims, tensor.to, bytes);
        file.release_data(info, 0..info.size);
    }
    Ok((writer, tensors))
}

/// Dequantizes a tensor's rows and quantizes them as the plan says, a few rows per task.
fn convert_tensor(data: &[u8], tensor: &TensorPlan) -> Result<Vec<u8>> {
    let columns = tensor.dims[0] as usize;
    let row_bytes = columns / tensor.from.block_size() * tensor.from.block_bytes();
    if row_bytes == 0 || !data.len().is_multiple_of(row_bytes) {
        return Err(Error::Quantize {
            kind: tensor.to.name(),
            len: data.len(),
            problem: format!("{} bytes are not whole rows of {row_bytes}", data.len()),
        });
    }
    let rows_per_task = VALUES_PER_TASK.div_ceil(columns).max(1);
    let pieces: Vec<Vec<u8>> = data
        .par_chunks(row_bytes * rows_per_task)
        .map(|rows| {
            let mut values = vec![0f32; rows.len() / row_bytes * columns];
            quant::dequantize_bytes(tensor.from, rows, &mut values);
            quant::quantize_bytes(tensor.to, &values)
        })
        .collect::<Result<_>>()?;
    Ok(pieces.concat())
}

/// Requantizes the GGUF file at `input` to `ftype` and writes it to `output` (through a scratch
/// file beside it, renamed into place once complete). This is what `strata model quantize` runs:
/// `requantize_file(q4_k_m, out, FileType::Q5KM)` writes what `llama-quantize --allow-requantize
/// IN OUT Q5_K_M` writes.
///
/// # Errors
/// When `input` is not a readable GGUF file, its metadata lacks what the type rules read, or the
/// output cannot be written.
pub fn requantize_file(input: &Path, output: &Path, ftype: FileType) -> Result<Requantized> {
    let file = GgufFile::open(input)?;
    let (writer, tensors) = requantize(&file, ftype)?;
    drop(file);
    let write_err = |e: std::io::Error| Error::Write {
        path: output.to_path_buf(),
        problem: e.to_string(),
    };
    let mut scratch_name = output.as_os_str().to_owned();
    scratch_name.push(".partial");
    let scratch = PathBuf::from(scratch_name);
    let written = (|| {
        let mut out = BufWriter::new(File::create(&scratch)?);
        writer.write_to(&mut out)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        fs::rename(&scratch, output)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&scratch);
        return Err(write_err(e));
    }
    let bytes = fs::metadata(output).map_err(write_err)?.len();
    Ok(Requantized {
        path: output.to_path_buf(),
        bytes,
        tensors,
    })
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
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::quant::QK_K;

    /// Gemma 3 270M's layers that llama.cpp's mixes give more bits (`use_more_bits` of 18).
    const GEMMA_MORE_BITS_LAYERS: [usize; 9] = [0, 1, 4, 7, 10, 13, 15, 16, 17];

    /// A Gemma 3 270M in miniature: its metadata keys, tensor names, row lengths (640, 1024, 2048)
    /// and 18 layers, with a few rows per matrix, all in `kind` where blocks allow (F32 otherwise).
    fn mini_gemma(kind: GgmlType, tied: bool) -> GgufWriter {
        let mut w = GgufWriter::new();
        w.metadata("general.architecture", MetaValue::String("gemma3".into()))
            .metadata("general.name", MetaValue::String("mini".into()))
            .metadata("gemma3.block_count", MetaValue::U32(18))
            .metadata("gemma3.embedding_length", MetaValue::U32(640))
            .metadata("general.quantization_version", MetaValue::U32(2))
            .metadata("general.file_type", MetaValue::U32(0))
            .metadata("tokenizer.ggml.model", MetaValue::String("llama".into()));
        let mut seed = 1u32;
        let mut matrix = |w: &mut GgufWriter, name: &str, columns: u64, rows: u64| {
            let values: Vec<f32> = (0..columns * rows)
                .map(|_| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
                })
                .collect();
            let kind = if columns.is_multiple_of(kind.block_size() as u64) {
                kind
            } else {
                GgmlType::F32
            };
            let bytes = quant::quantize_bytes(kind, &values).expect("whole blocks");
            w.tensor(name, &[columns, rows], kind, bytes);
        };
        let norm = |w: &mut GgufWriter, name: &str, width: u64| {
            let bytes: Vec<u8> = (0..width).flat_map(|_| 1f32.to_le_bytes()).collect();
            w.tensor(name, &[width], GgmlType::F32, bytes);
        };
        // The file order of a converted model (not llama-quantize's order).
        matrix(&mut w, "token_embd.weight", 640, 8);
        for i in 0..18 {
            let name = |part: &str| format!("blk.{i}.{part}");
            norm(&mut w, &name("attn_norm.weight"), 640);
            matrix(&mut w, &name("attn_q.weight"), 640, 4);
            matrix(&mut w, &name("attn_k.weight"), 640, 2);
            matrix(&mut w, &name("attn_v.weight"), 640, 2);
            norm(&mut w, &name("attn_q_norm.weight"), 256);
            norm(&mut w, &name("attn_k_norm.weight"), 256);
            matrix(&mut w, &name("attn_output.weight"), 1024, 2);
            norm(&mut w, &name("post_attention_norm.weight"), 640);
            norm(&mut w, &name("ffn_norm.weight"), 640);
            matrix(&mut w, &name("ffn_gate.weight"), 640, 4);
            matrix(&mut w, &name("ffn_up.weight"), 640, 4);
            matrix(&mut w, &name("ffn_down.weight"), 2048, 2);
            norm(&mut w, &name("post_ffw_norm.weight"), 640);
        }
        norm(&mut w, "output_norm.weight", 640);
        if !tied {
            matrix(&mut w, "output.weight", 640, 8);
        }
        w
    }

    fn parse(w: &GgufWriter) -> GgufFile {
        GgufFile::from_bytes(Path::new("mini.gguf"), w.to_bytes()).expect("parses")
    }

    fn counts(tensors: &[TensorPlan]) -> BTreeMap<&'static str, usize> {
        type_counts(tensors)
            .into_iter()
            .map(|(kind, n)| (kind.name(), n))
            .collect()
    }

    fn type_of<'a>(tensors: &'a [TensorPlan], name: &str) -> &'a TensorPlan {
        tensors.iter().find(|t| t.name == name).expect(name)
    }

    #[test]
    fn more_bits_layers_are_llama_cpps() {
        let layers: Vec<usize> = (0..18).filter(|&i| use_more_bits(i, 18)).collect();
        assert_eq!(layers, GEMMA_MORE_BITS_LAYERS);
        let layers: Vec<usize> = (0..32).filter(|&i| use_more_bits(i, 32)).collect();
        assert_eq!(
            layers,
            [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
        );
    }

    #[test]
    fn tensors_are_ordered_by_layer_then_name() {
        let mut names = vec![
            "blk.10.attn_q.weight",
            "output_norm.weight",
            "blk.2.ffn_up.weight",
            "blk.2.attn_k.weight",
            "token_embd.weight",
            "blk.0.attn_v.weight",
        ];
        names.sort_by(|a, b| weight_order(a, b));
        assert_eq!(
            names,
            [
                "output_norm.weight",
                "token_embd.weight",
                "blk.0.attn_v.weight",
                "blk.2.attn_k.weight",
                "blk.2.ffn_up.weight",
                "blk.10.attn_q.weight",
            ]
        );
    }

    #[test]
    fn categories_and_quantizable_tensors_follow_llama_cpp() {
        assert_eq!(Category::of("blk.0.attn_v.weight"), Category::AttentionV);
        assert_eq!(
            Category::of("blk.0.attn_qkv.weight"),
            Category::AttentionQkv
        );
        assert_eq!(
            Category::of("blk.3.ffn_down_exps.weight"),
            Category::FfnDown
        );
        assert_eq!(Category::of("output.weight"), Category::Output);
        assert_eq!(Category::of("blk.0.attn_k_norm.weight"), Category::Other);
        assert!(allows_quantization("blk.0.attn_q.weight", 2));
        assert!(!allows_quantization("blk.0.attn_norm.weight", 2));
        assert!(!allows_quantization("blk.0.ffn_gate_inp.weight", 2));
        assert!(!allows_quantization("blk.0.attn_q.bias", 2));
        assert!(!allows_quantization("token_embd.weight", 1));
        assert_eq!(ggml_n_dims(&[640, 1]), 1);
        assert_eq!(ggml_n_dims(&[640, 2, 1]), 2);
        assert_eq!(ggml_n_dims(&[1]), 1);
    }

    #[test]
    fn fallbacks_for_rows_that_are_not_whole_super_blocks() {
        assert_eq!(fallback(640, GgmlType::Q4K), GgmlType::Q5_0);
        assert_eq!(fallback(640, GgmlType::Q5K), GgmlType::Q5_1);
        assert_eq!(fallback(640, GgmlType::Q6K), GgmlType::Q8_0);
        assert_eq!(fallback(1024, GgmlType::Q5K), GgmlType::Q5K);
        assert_eq!(fallback(48, GgmlType::Q6K), GgmlType::F16);
        assert_eq!(fallback(48, GgmlType::Q4_0), GgmlType::F16);
    }

    /// The mix of the real Gemma 3 270M Q4_K_M file, and of llama-quantize's Q5_K_M from it.
    #[test]
    fn gemma_mixes_match_llama_quantize() {
        let file = parse(&mini_gemma(GgmlType::F32, true));
        let q4 = plan(&file, FileType::Q4KM).unwrap();
        assert_eq!(
            counts(&q4),
            BTreeMap::from([
                ("F32", 109),
                ("Q4_K", 27),
                ("Q5_0", 81),
                ("Q6_K", 9),
                ("Q8_0", 10)
            ])
        );
        let q5 = plan(&file, FileType::Q5KM).unwrap();
        assert_eq!(
            counts(&q5),
            BTreeMap::from([
                ("F32", 109),
                ("Q5_K", 27),
                ("Q5_1", 81),
                ("Q6_K", 9),
                ("Q8_0", 10)
            ])
        );
        for i in 0..18 {
            let more = GEMMA_MORE_BITS_LAYERS.contains(&i);
            let v = type_of(&q5, &format!("blk.{i}.attn_v.weight")).to;
            let down = type_of(&q5, &format!("blk.{i}.ffn_down.weight")).to;
            assert_eq!(
                v,
                if more { GgmlType::Q8_0 } else { GgmlType::Q5_1 },
                "layer {i}"
            );
            assert_eq!(
                down,
                if more { GgmlType::Q6K } else { GgmlType::Q5K },
                "layer {i}"
            );
            let q = type_of(&q5, &format!("blk.{i}.attn_q.weight")).to;
            assert_eq!(q, GgmlType::Q5_1);
            let out = type_of(&q5, &format!("blk.{i}.attn_output.weight")).to;
            assert_eq!(out, GgmlType::Q5K);
        }
        assert_eq!(type_of(&q5, "token_embd.weight").to, GgmlType::Q8_0);
        assert_eq!(q5[0].name, "output_norm.weight");
        assert_eq!(q5[1].name, "token_embd.weight");
        assert_eq!(q5[2].name, "blk.0.attn_k.weight");
    }

    #[test]
    fn plain_mixes_and_the_output_head() {
        let file = parse(&mini_gemma(GgmlType::F32, false));
        let q8 = plan(&file, FileType::Q8_0).unwrap();
        assert_eq!(counts(&q8), BTreeMap::from([("F32", 109), ("Q8_0", 128)]));
        let q4 = plan(&file, FileType::Q4_0).unwrap();
        // The output head of a Q4_0 file is Q6_K, here Q8_0 for its 640-wide rows; untied
        // embeddings keep the file's default type.
        assert_eq!(type_of(&q4, "output.weight").to, GgmlType::Q8_0);
        assert_eq!(type_of(&q4, "token_embd.weight").to, GgmlType::Q4_0);
        assert_eq!(type_of(&q4, "blk.3.ffn_down.weight").to, GgmlType::Q4_0);
        let f16 = plan(&file, FileType::F16).unwrap();
        assert_eq!(counts(&f16), BTreeMap::from([("F16", 128), ("F32", 109)]));
        let q4ks = plan(&file, FileType::Q4KS).unwrap();
        assert_eq!(type_of(&q4ks, "blk.1.ffn_down.weight").to, GgmlType::Q5K);
        assert_eq!(type_of(&q4ks, "blk.2.ffn_down.weight").to, GgmlType::Q4K);
        assert_eq!(type_of(&q4ks, "blk.3.attn_v.weight").to, GgmlType::Q5_1);
        assert_eq!(type_of(&q4ks, "blk.4.attn_v.weight").to, GgmlType::Q5_0);
    }

    #[test]
    fn requantizing_keeps_metadata_order_and_copies_tensors_already_in_type() {
        let source = mini_gemma(GgmlType::Q8_0, true);
        let file = parse(&source);
        let (writer, tensors) = requantize(&file, FileType::Q5KM).unwrap();
        let out = parse(&writer);
        let keys: Vec<&str> = out.metadata_in_file_order().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "general.architecture",
                "general.name",
                "gemma3.block_count",
                "gemma3.embedding_length",
                "tokenizer.ggml.model",
                "general.quantization_version",
                "general.file_type",
            ]
        );
        assert_eq!(out.meta("general.file_type"), Some(&MetaValue::U32(17)));
        for (info, plan) in out.tensors.iter().zip(&tensors) {
            assert_eq!(
                (info.name.as_str(), info.kind),
                (plan.name.as_str(), plan.to)
            );
            let input = file.tensor(&info.name).unwrap();
            assert_eq!(info.dims, input.dims, "{}", info.name);
            if !plan.converts() {
                assert_eq!(
                    out.tensor_data(info),
                    file.tensor_data(input),
                    "{}",
                    info.name
                );
                continue;
            }
            let n = info.elements() as usize;
            let (mut before, mut after) = (vec![0f32; n], vec![0f32; n]);
            quant::dequantize_bytes(input.kind, file.tensor_data(input), &mut before);
            quant::dequantize_bytes(info.kind, out.tensor_data(info), &mut after);
            let worst = before
                .iter()
                .zip(&after)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 0.05, "{}: off by {worst}", info.name);
            // Each conversion is ggml's quantizer applied to the dequantized rows.
            let expected = quant::quantize_bytes(plan.to, &before).unwrap();
            assert_eq!(out.tensor_data(info), expected, "{}", info.name);
        }
    }

    #[test]
    fn requantizing_twice_to_the_same_type_is_a_copy() {
        let file = parse(&mini_gemma(GgmlType::F32, true));
        let (once, _) = requantize(&file, FileType::Q5KM).unwrap();
        let once = once.to_bytes();
        let again = GgufFile::from_bytes(Path::new("q5.gguf"), once.clone()).unwrap();
        let (twice, tensors) = requantize(&again, FileType::Q5KM).unwrap();
        assert!(tensors.iter().all(|t| !t.converts()));
        assert_eq!(twice.to_bytes(), once);
    }

    #[test]
    fn files_without_architecture_or_block_count_are_refused() {
        let mut w = mini_gemma(GgmlType::F32, true);
        w.remove_metadata("gemma3.block_count");
        let err = plan(&parse(&w), FileType::Q5KM).unwrap_err();
        assert!(err.to_string().contains("gemma3.block_count"), "{err}");
        w.remove_metadata("general.architecture");
        let err = plan(&parse(&w), FileType::Q5KM).unwrap_err();
        assert!(err.to_string().contains("general.architecture"), "{err}");
    }

    #[test]
    fn file_types_parse_by_name() {
        for ftype in FileType::ALL {
            assert_eq!(ftype.name().parse::<FileType>(), Ok(ftype));
        }
        assert_eq!("Q5_K_M".parse::<FileType>(), Ok(FileType::Q5KM));
        let err = "q3_k".parse::<FileType>().unwrap_err();
        assert!(err.contains("q5_k_m"), "{err}");
        assert_eq!(FileType::Q5KM.id(), 17);
        assert_eq!(FileType::Q4KM.default_type().block_size(), QK_K);
    }

    #[test]
    fn requantize_file_writes_through_a_scratch_file() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.gguf");
        fs::write(&input, mini_gemma(GgmlType::F32, true).to_bytes()).unwrap();
        let output = dir.path().join("out.gguf");
        let done = requantize_file(&input, &output, FileType::Q8_0).unwrap();
        assert_eq!(done.bytes, fs::metadata(&output).unwrap().len());
        let out = GgufFile::open(&output).unwrap();
        assert_eq!(out.tensors.len(), done.tensors.len());
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["in.gguf", "out.gguf"]);
        let err = requantize_file(&input, &dir.path().join("no/such/dir.gguf"), FileType::Q8_0)
            .unwrap_err();
        assert!(err.to_string().contains("no/such/dir.gguf"), "{err}");
    }
}
