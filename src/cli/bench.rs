//! `strata bench`: llama-bench style throughput table (or JSON) for weight types × thread counts.

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use strata_engine::{
    bench::{self, BenchSpec},
    loader::LoadedModel,
    model::{KvType, LoadOptions},
    weights::WeightType,
};

use super::{GlobalArgs, generate::resolve_model};

/// Arguments of `strata bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// A GGUF file, a Hugging Face folder, or the name of a cached model.
    #[arg(long, short = 'm', value_name = "PATH|NAME")]
    model: String,
    /// Runtime weight types to measure [default: the file's own].
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    weights: Vec<WeightType>,
    /// Thread counts to measure.
    #[arg(
        long,
        short = 't',
        value_delimiter = ',',
        default_value = "2",
        value_name = "LIST"
    )]
    threads: Vec<usize>,
    /// Prompt lengths (pp tests); 0 skips them.
    #[arg(
        short = 'p',
        value_delimiter = ',',
        default_value = "512",
        value_name = "LIST"
    )]
    prompt: Vec<usize>,
    /// Generation lengths (tg tests); 0 skips them.
    #[arg(
        short = 'n',
        value_delimiter = ',',
        default_value = "128",
        value_name = "LIST"
    )]
    generate: Vec<usize>,
    /// Timed repetitions of each test.
    #[arg(short = 'r', long, default_value_t = 5)]
    repetitions: usize,
    /// Key/value cache type.
    #[arg(long, default_value = "f16", value_parser = parse_kv)]
    kv: KvType,
    /// Print JSON records instead of a table.
    #[arg(long)]
    json: bool,
}

/// One measured test, as printed with `--json`.
#[derive(Debug, Serialize)]
struct Record {
    model: String,
    weights: WeightType,
    threads: usize,
    kv: KvType,
    test: String,
    tokens: usize,
    tokens_per_sec: f64,
    stddev: f64,
    samples: Vec<f64>,
    peak_rss_bytes: Option<u64>,
}

impl BenchArgs {
    /// Runs the command.
    pub(crate) fn run(self, _global: &GlobalArgs) -> anyhow::Result<()> {
        let path = resolve_model(&self.model)?;
        let name = path
            .file_name()
            .map_or_else(|| self.model.clone(), |n| n.to_string_lossy().into_owned());
        let spec = BenchSpec {
            prompt_lengths: self.prompt.iter().copied().filter(|&n| n > 0).collect(),
            generation_lengths: self.generate.iter().copied().filter(|&n| n > 0).collect(),
            repetitions: self.repetitions,
            kv: self.kv,
        };
        let weights: Vec<Option<WeightType>> = if self.weights.is_empty() {
            vec![None]
        } else {
            self.weights.iter().copied().map(Some).collect()
        };
        if !self.json {
            println!("| model | weights | threads | test | tokens/s |");
            println!("|---|---|---|---|---|");
        }
        let mut records = Vec::new();
        for &w in &weights {
            for &threads in &self.threads {
                let loaded = LoadedModel::open(
                    &path,
                    LoadOptions {
                        weights: w,
                        threads,
                        placement: Default::default(),
                    },
                )
                .with_context(|| format!("loading {}", path.display()))?;
                for result in bench::run(&loaded, &spec)? {
                    let record = Record {
                        model: name.clone(),
                        weights: loaded.model.weight_type(),
                        threads: loaded.model.threads(),
                        kv: self.kv,
                        test: result.test,
                        tokens: result.tokens,
                        tokens_per_sec: result.tokens_per_sec,
                        stddev: result.stddev,
                        samples: result.samples,
                        peak_rss_bytes: peak_rss_bytes(),
                    };
                    if !self.json {
                        println!(
                            "| {} | {} | {} | {} | {:.2} ± {:.2} |",
                            record.model,
                            record.weights,
                            record.threads,
                            record.test,
                            record.tokens_per_sec,
                            record.stddev
                        );
                    }
                    records.push(record);
                }
            }
        }
        if self.json {
            println!("{}", serde_json::to_string_pretty(&records)?);
        } else if let Some(rss) = peak_rss_bytes() {
            println!("\npeak RSS: {:.1} MiB", rss as f64 / (1024.0 * 1024.0));
        }
        Ok(())
    }
}

fn parse_kv(s: &str) -> Result<KvType, String> {
    match s {
        "f16" => Ok(KvType::F16),
        "f32" => Ok(KvType::F32),
        other => Err(format!(
            "unknown cache type {other:?} (expected f16 or f32)"
        )),
    }
}

/// The process's peak resident set (`VmHWM`), where the OS reports it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
