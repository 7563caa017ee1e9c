//! `strata profile`: measure configs under load, either a sweep of local engine configs (each run as
//! a real server) or any OpenAI-compatible endpoint, with a progress bar and a summary table.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use strata_controller::{
    hardware,
    loadgen::{self, Api, Arrival, Lengths, LoadReport, LoadSpec, Shape, Sla},
    profile::{self, Progress, RunContext, Sweep},
    quality,
};

/// `strata pilot` records its model the same way.
pub(crate) use strata_controller::model_identity::ensure_model;

use super::{GlobalArgs, generate::resolve_model};

/// Arguments of `strata profile`.
#[derive(Debug, Args)]
pub(crate) struct ProfileArgs {
    /// A sweep file (TOML): model, weight types, threads, batch sizes, KV memory, workload shapes.
    #[arg(long, value_name = "SWEEP.toml", conflicts_with = "endpoint")]
    sweep: Option<PathBuf>,
    /// Measure configs again even when this host and engine version already have their runs.
    #[arg(long)]
    force: bool,
    /// Queue the sweep's configs as jobs for `strata worker` processes instead of running them here.
    #[arg(long, requires = "sweep")]
    enqueue: bool,
    /// Profile an OpenAI-compatible endpoint instead (base URL without /v1).
    #[arg(long, value_name = "URL", requires = "model")]
    endpoint: Option<String>,
    /// The model name the endpoint serves.
    #[arg(long)]
    model: Option<String>,
    /// Environment variable holding the endpoint's API key.
    #[arg(long, value_name = "VAR")]
    api_key_env: Option<String>,
    /// Use the chat API rather than completions (endpoint mode).
    #[arg(long)]
    chat: bool,
    /// Prompt tokens per request (endpoint mode).
    #[arg(long, default_value_t = 128)]
    prompt_tokens: usize,
    /// Output tokens per request (endpoint mode).
    #[arg(long, default_value_t = 128)]
    output_tokens: usize,
    /// Concurrent clients, closed loop (endpoint mode).
    #[arg(long, default_value_t = 4, conflicts_with = "rate")]
    concurrency: usize,
    /// Poisson arrival rate in requests/s, open loop (endpoint mode).
    #[arg(long)]
    rate: Option<f64>,
    /// Measured requests (endpoint mode; 32 unless --duration is given, then the most sent).
    #[arg(long)]
    requests: Option<usize>,
    /// Send load for this many seconds instead of a request count (endpoint mode).
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Print the endpoint's figures without recording them in the store (endpoint mode).
    #[arg(long)]
    no_store: bool,
    /// Warm-up requests (endpoint mode).
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Send prompts as token ids (exact lengths; same vocabulary only) (endpoint mode).
    #[arg(long)]
    token_prompts: bool,
    /// p99 TTFT target for goodput, ms (endpoint mode).
    #[arg(long)]
    sla_ttft_ms: Option<f64>,
    /// p99 TPOT target for goodput, ms (endpoint mode).
    #[arg(long)]
    sla_tpot_ms: Option<f64>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

impl ProfileArgs {
    /// Runs the command.
    pub(crate) fn run(self, global: &GlobalArgs) -> anyhow::Result<()> {
        let runtime = super::runtime(super::Workers::Two)?;
        match (&self.sweep, &self.endpoint) {
            (Some(path), _) => runtime.block_on(self.run_sweep(global, path)),
            (None, Some(url)) => runtime.block_on(self.run_endpoint(global, url)),
            (None, None) => anyhow::bail!("give --sweep SWEEP.toml or --endpoint URL --model NAME"),
        }
    }

    async fn run_endpoint(&self, global: &GlobalArgs, url: &str) -> anyhow::Result<()> {
        let api_key = match &self.api_key_env {
            Some(var) => Some(std::env::var(var).with_context(|| format!("reading ${var}"))?),
            None => None,
        };
        let spec = LoadSpec {
            base_url: url.trim_end_matches('/').trim_end_matches("/v1").to_owned(),
            model: self.model.clone().unwrap_or_default(),
            api_key,
            api: if self.chat {
                Api::Chat
            } else {
                Api::Completions
            },
            shape: Shape {
                prompt_tokens: Lengths::Fixed(self.prompt_tokens),
                output_tokens: Lengths::Fixed(self.output_tokens),
                arrival: match self.rate {
                    Some(rate) => Arrival::Poisson { rate },
                    None => Arrival::Closed {
                        concurrency: self.concurrency,
                    },
                },
                requests: self
                    .requests
                    .unwrap_or(if self.duration.is_some() { 0 } else { 32 }),
                duration_s: self.duration,
                warmup: self.warmup,
            },
            token_prompts: self.token_prompts,
            ignore_eos: true,
            sla: Sla {
                ttft_ms: self.sla_ttft_ms,
                tpot_ms: self.sla_tpot_ms,
                e2e_ms: None,
            },
            seed: 0,
            timeout: Duration::from_secs(600),
        };
        let amount = match spec.shape.duration_s {
            Some(seconds) => format!("{seconds} s of requests"),
            None => format!("{} requests", spec.shape.requests),
        };
        let spinner = ProgressBar::new_spinner()
            .with_message(format!("{amount} to {url} ({:?})", spec.shape.arrival));
        spinner.enable_steady_tick(Duration::from_millis(200));
        let started_at = chrono::Utc::now();
        let report = loadgen::run(&spec).await?;
        spinner.finish_and_clear();
        if !self.no_store {
            let (shown, store) = super::store::open(global).await?;
            let run = profile::record_endpoint_run(
                store.as_ref(),
                &spec,
                &report,
                started_at,
                env!("CARGO_PKG_VERSION"),
            )
            .await?;
            store.close().await;
            eprintln!(
                "recorded as endpoint run {} of {} ({}) in {shown}",
                run.id, spec.base_url, spec.model
            );
        }
        if self.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            println!("{}", header());
            println!("{}", row(&spec.model, "endpoint", &report, None, None));
            print_errors(&report);
        }
        Ok(())
    }

    async fn run_sweep(&self, global: &GlobalArgs, path: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the sweep file {}", path.display()))?;
        let sweep =
            Sweep::from_toml_str(&text).with_context(|| format!("in {}", path.display()))?;
        let model_file = resolve_model(&sweep.model)?;
        let (_, store) = super::store::open(global).await?;
        let hardware = hardware::ensure_recorded(store.as_ref()).await?;
        let model = ensure_model(store.as_ref(), &sweep.model, &model_file).await?;
        let engine_version = env!("CARGO_PKG_VERSION");
        let ctx = RunContext {
            store: store.as_ref(),
            hardware: &hardware,
            model: &model,
            engine_version,
        };
        if self.enqueue {
            let jobs = strata_controller::worker::enqueue_sweep(
                store.as_ref(),
                &sweep,
                model.id,
                model_file,
            )
            .await?;
            let ids: Vec<i64> = jobs.iter().map(|j| j.id.0).collect();
            store.close().await;
            if self.json {
                println!("{}", serde_json::json!({ "jobs": ids }));
            } else {
                println!(
                    "queued {} profiling jobs (ids {ids:?}); run `strata worker` to work them off",
                    ids.len()
                );
            }
            return Ok(());
        }
        let exe = std::env::current_exe().context("locating the strata binary")?;
        let configs = sweep.configs();
        let bar = progress_bar((configs.len() * sweep.shapes.len()) as u64, self.json);
        let mut outcomes = Vec::new();
        let mut capacities = Vec::new();
        for settings in &configs {
            let outcome = profile::run_config(
                &ctx,
                &exe,
                &model_file,
                &sweep,
                settings,
                self.force,
                |event| match event {
                    Progress::Starting => bar.set_message(format!("{settings}: starting the engine")),
                    Progress::Measuring(shape) => bar.set_message(format!("{settings}: {shape}")),
                    Progress::ShapeDone => bar.inc(1),
                    Progress::Probe { point, met } => bar.set_message(format!(
                        "{settings}: capacity probe {:.2} req/s -> TTFT p99 {:.0} ms, TPOT p99 {:.1} ms {}",
                        point.rate_rps,
                        point.ttft_p99_ms,
                        point.tpot_p99_ms,
                        if met { "meets" } else { "misses" }
                    )),
                },
            )
            .await
            .with_context(|| format!("profiling {settings}"))?;
            if let Some(rps) = outcome.capacity_rps {
                capacities.push((settings.clone(), rps));
            }
            outcomes.extend(outcome.runs);
        }
        let quality = if sweep.quality {
            bar.set_message("scoring quality per weight type");
            profile::record_sweep_quality(&ctx, &model_file, &sweep, self.force).await?
        } else {
            Vec::new()
        };
        bar.finish_and_clear();
        store.close().await;
        if self.json {
            let capacity: Vec<_> = capacities
                .iter()
                .map(|(s, rps)| serde_json::json!({"config": s, "max_requests_per_s": rps}))
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "hardware": hardware,
                    "runs": outcomes,
                    "capacity": capacity,
                    "quality": quality,
                }))?
            );
            return Ok(());
        }
        println!(
            "host: {} ({} cores / {} threads, {} NUMA node(s), {:.1} GB/s measured)",
            hardware.cpu_model,
            hardware.cores,
            hardware.threads,
            hardware.numa_nodes,
            hardware.bandwidth_gb_per_s.unwrap_or(0.0)
        );
        println!("{}", header());
        for o in &outcomes {
            let capacity = capacities
                .iter()
                .find(|(s, _)| s == &o.settings)
                .map(|(_, c)| *c);
            println!(
                "{}",
                row(
                    &o.settings.to_string(),
                    &o.shape,
                    &o.report,
                    Some((o.peak_rss_bytes, o.cpu_utilization, o.reused)),
                    capacity
                )
            );
        }
        for q in &quality {
            println!(
                "quality {:<6} perplexity {:.3} on {} ({} positions), top-1 agreement with f32 {}",
                q.weights,
                q.perplexity,
                quality::TEXT_ID,
                q.tokens,
                q.top1_agreement
                    .map_or("(reference)".into(), |a| format!("{:.1}%", a * 100.0))
            );
        }
        println!(
            "TTFT: arrival to first token; TPOT: mean gap between output tokens per request; \
             E2E: arrival to last token (p50/p99, ms)."
        );
        Ok(())
    }
}

fn progress_bar(total: u64, hidden: bool) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} runs, ETA {eta} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

fn header() -> String {
    format!(
        "{:<28} {:<10} {:>5} {:>4} {:>9} {:>15} {:>13} {:>9} {:>8} {:>8} {:>5} {:>9}",
        "config",
        "shape",
        "reqs",
        "err",
        "out tok/s",
        "TTFT p50/p99",
        "TPOT p50/p99",
        "E2E p99",
        "goodput",
        "RSS MiB",
        "CPU",
        "cap rps"
    )
}

fn row(
    config: &str,
    shape: &str,
    r: &LoadReport,
    process: Option<(u64, f64, bool)>,
    capacity: Option<f64>,
) -> String {
    let (rss, cpu, reused) =
        process.map_or(("-".into(), "-".into(), false), |(rss, cpu, reused)| {
            (
                format!("{}", rss >> 20),
                format!("{:.0}%", cpu * 100.0),
                reused,
            )
        });
    format!(
        "{:<28} {:<10} {:>5} {:>4} {:>9.1} {:>15} {:>13} {:>9.0} {:>8.2} {:>8} {:>5} {:>9}{}",
        config,
        shape,
        r.requests,
        r.errors,
        r.output_tokens_per_s,
        format!("{:.0}/{:.0}", r.ttft_ms.p50, r.ttft_ms.p99),
        format!("{:.1}/{:.1}", r.tpot_ms.p50, r.tpot_ms.p99),
        r.e2e_ms.p99,
        r.goodput_requests_per_s,
        rss,
        cpu,
        capacity.map_or("-".into(), |c| format!("{c:.2}")),
        if reused { "  (stored)" } else { "" }
    )
}

fn print_errors(report: &LoadReport) {
    for e in &report.error_samples {
        eprintln!("error: {e}");
    }
}
