//! `strata bench`: llama-bench style throughput table (or JSON) for weight types × thread counts.

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use strata_controller::hardware;
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
    /// Generation tests: what decode moved against the read bandwidth measured right after.
    #[serde(skip_serializing_if = "Option::is_none")]
    decode: Option<DecodeShare>,
}

/// Decode against the memory's read bandwidth: at batch 1 every weight a token needs is read once.
#[derive(Debug, Serialize)]
struct DecodeShare {
    /// Weight bytes one token reads.
    bytes_per_token: usize,
    /// Read bandwidth with the test's thread count, measured right after the test.
    read_bandwidth_gb_per_s: f64,
    /// `bytes_per_token x tokens/s / read bandwidth`.
    share: f64,
}

impl DecodeShare {
    /// Measures the read bandwidth now and relates `tokens_per_sec` of `bytes_per_token` to it.
    fn measure(bytes_per_token: usize, tokens_per_sec: f64, threads: usize) -> Self {
        let read_bandwidth_gb_per_s = hardware::read_bandwidth_gb_per_s(threads);
        let moved = bytes_per_token as f64 * tokens_per_sec / 1e9;
        Self {
            bytes_per_token,
            read_bandwidth_gb_per_s,
            share: moved / read_bandwidth_gb_per_s,
        }
    }
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
            println!("| model | weights | threads | test | tokens/s | decode / read bandwidth |");
            println!("|---|---|---|---|---|---|");
        }
        let mut records = Vec::new();
        let mut peak = PeakRss::default();
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
                let bytes_per_token = loaded.model.decode_bytes_per_token();
                for result in bench::run(&loaded, &spec)? {
                    let decode = result.test.starts_with("tg").then(|| {
                        peak.around_probe(|| {
                            DecodeShare::measure(bytes_per_token, result.tokens_per_sec, threads)
                        })
                    });
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
                        peak_rss_bytes: peak.bytes(),
                        decode,
                    };
                    if !self.json {
                        println!(
                            "| {} | {} | {} | {} | {:.2} ± {:.2} | {} |",
                            record.model,
                            record.weights,
                            record.threads,
                            record.test,
                            record.tokens_per_sec,
                            record.stddev,
                            record.decode.as_ref().map_or_else(String::new, |d| format!(
                                "{:.0}% of {:.1} GB/s ({:.0} MB a token)",
                                100.0 * d.share,
                                d.read_bandwidth_gb_per_s,
                                d.bytes_per_token as f64 / 1e6
                            ))
                        );
                    }
                    records.push(record);
                }
            }
        }
        if self.json {
            println!("{}", serde_json::to_string_pretty(&records)?);
        } else if let Some(rss) = peak.bytes() {
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

/// The process's peak resident set over the tests, without the bandwidth probes' buffers.
#[derive(Default)]
struct PeakRss {
    /// The highest peak seen before a probe.
    before_probes: Option<u64>,
}

impl PeakRss {
    /// Runs `probe`, keeping the peak before it and resetting the OS's peak after it (its buffer is
    /// freed by then), where the OS allows that.
    fn around_probe<T>(&mut self, probe: impl FnOnce() -> T) -> T {
        self.before_probes = self.bytes();
        let value = probe();
        if let Err(err) = std::fs::write("/proc/self/clear_refs", "5") {
            tracing::debug!(%err, "cannot reset the peak resident set; it includes the bandwidth probe");
        }
        value
    }

    /// The peak so far.
    fn bytes(&self) -> Option<u64> {
        self.before_probes.max(peak_rss_bytes())
    }
}

/// The process's peak resident set (`VmHWM`), where the OS reports it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
