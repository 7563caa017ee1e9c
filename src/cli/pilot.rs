//! `strata pilot`: should this workload move to CPU? Profiles the candidate configs, gates their quality,
//! plans and simulates the day, replays the busiest hour through a real gateway and engine, prints the
//! verdict and records the report; the exit status is the verdict (0 migrate, 3 partial, 4 stay).

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use anyhow::{Context, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use strata_controller::{
    hardware,
    pilot::{self, Comparison, GpuEndpoint, Pilot, PilotReport, Step},
    profile::{Progress, RunContext},
};
use strata_planner::{pilot::baseline, workload::Budget};

use super::{
    GlobalArgs,
    generate::resolve_model,
    plan::{read_catalog, read_workload},
    profile::ensure_model,
    store,
};

/// Arguments of `strata pilot`.
#[derive(Debug, Args)]
pub(crate) struct PilotArgs {
    /// The workload: classes, SLAs, arrivals, budget, GPU fallback and its `[pilot]` settings (TOML).
    #[arg(long, value_name = "FILE")]
    workload: PathBuf,
    /// Prices merged over the builtin catalog (TOML).
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
    /// The GPU baseline: a catalog GPU instance type or endpoint, or a price like `0.20/1M` or
    /// `0.10:0.40/1M` ($ per million prompt:output tokens) [default: the workload's `[gpu_fallback]`].
    #[arg(long, value_name = "GPU_POOL_OR_PRICE")]
    baseline: Option<String>,
    /// The GPU baseline's OpenAI-compatible endpoint, to take part in the replay.
    #[arg(long, value_name = "URL")]
    gpu_endpoint: Option<String>,
    /// The model name the GPU endpoint serves (the CPU engine is served under the same name).
    #[arg(long, value_name = "NAME", requires = "gpu_endpoint")]
    gpu_model: Option<String>,
    /// Environment variable holding the GPU endpoint's API key.
    #[arg(long, value_name = "VAR", requires = "gpu_endpoint")]
    gpu_api_key_env: Option<String>,
    /// The model: a file, folder or cached model name [default: the workload's `pilot.model`].
    #[arg(long, value_name = "PATH_OR_NAME")]
    model: Option<String>,
    /// Daily budget, $ (overrides the workload's).
    #[arg(long, value_name = "USD", conflicts_with = "budget_per_month")]
    budget_per_day: Option<f64>,
    /// Monthly budget, $ (overrides the workload's).
    #[arg(long, value_name = "USD")]
    budget_per_month: Option<f64>,
    /// Seconds of traffic to replay (overrides `pilot.replay_s`).
    #[arg(long, value_name = "S")]
    replay_s: Option<f64>,
    /// Seed (overrides `pilot.seed`).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Print the report as JSON instead of a summary.
    #[arg(long)]
    json: bool,
    /// Exit 0 whatever the verdict (for a script that goes on to other commands); errors still exit 1.
    #[arg(long)]
    exit_zero: bool,
}

impl PilotArgs {
    /// Runs the pilot; the exit status is the verdict's.
    pub(crate) fn run(self, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
        let runtime = super::runtime(super::Workers::Two)?;
        runtime.block_on(self.run_async(global))
    }

    async fn run_async(self, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
        let (mut workload, spec) = read_workload(&self.workload, None)?;
        let mut spec = spec.unwrap_or_default();
        if let Some(s) = self.replay_s {
            spec.replay_s = s;
        }
        if let Some(seed) = self.seed {
            spec.seed = seed;
        }
        spec.validate(&workload.name)?;
        let mut catalog = read_catalog(self.catalog.as_deref())?;
        if let Some(arg) = &self.baseline {
            workload.gpu_fallback = Some(baseline(arg, &workload, &mut catalog)?);
        }
        if workload.gpu_fallback.is_none() {
            bail!(
                "{}: no GPU baseline: give --baseline, or a [gpu_fallback] in the workload",
                self.workload.display()
            );
        }
        self.override_budget(&mut workload.budget);
        let model_name = match (&self.model, &spec.model) {
            (Some(m), _) | (None, Some(m)) => m.clone(),
            (None, None) => bail!(
                "{}: no model: give --model, or `model` in its [pilot] table",
                self.workload.display()
            ),
        };
        let model_file = resolve_model(&model_name)?;
        let gpu_endpoint = self.gpu_endpoint.as_ref().map(|url| GpuEndpoint {
            url: url.trim_end_matches('/').trim_end_matches("/v1").to_owned(),
            model: self.gpu_model.clone().unwrap_or_else(|| model_name.clone()),
            api_key_env: self.gpu_api_key_env.clone(),
        });

        let (_, db) = store::open(global).await?;
        let hardware = hardware::ensure_recorded(db.as_ref()).await?;
        let model = ensure_model(db.as_ref(), &model_name, &model_file).await?;
        let exe = std::env::current_exe().context("locating the strata binary")?;
        let pilot = Pilot {
            ctx: RunContext {
                store: db.as_ref(),
                hardware: &hardware,
                model: &model,
                engine_version: env!("CARGO_PKG_VERSION"),
            },
            exe: &exe,
            model_file: &model_file,
            workload: &workload,
            spec: &spec,
            catalog: &catalog,
            gpu_endpoint: gpu_endpoint.as_ref(),
            database_url: global.database_url.as_deref(),
        };
        let bar = spinner(self.json);
        let outcome = pilot::run(&pilot, |step| {
            let message = describe(&step);
            if is_milestone(&step) {
                bar.suspend(|| tracing::info!("{message}"));
            }
            bar.set_message(message);
        })
        .await;
        bar.finish_and_clear();
        db.close().await;
        let outcome = outcome.with_context(|| format!("pilot of {}", self.workload.display()))?;
        if self.json {
            println!("{}", serde_json::to_string_pretty(&outcome.report)?);
        } else {
            print!("{}", render(&outcome.report, outcome.id.0, &self.workload));
        }
        Ok(if self.exit_zero {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(outcome.report.exit_code)
        })
    }

    fn override_budget(&self, budget: &mut Budget) {
        if let Some(day) = self.budget_per_day {
            budget.per_day = Some(day);
        }
        if let Some(month) = self.budget_per_month {
            budget.per_day = Some(month / strata_planner::workload::DAYS_PER_MONTH);
        }
    }
}

fn spinner(hidden: bool) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

/// Steps worth a log line (with its timestamp), not just the spinner.
fn is_milestone(step: &Step) -> bool {
    !matches!(
        step,
        Step::Profiling(_, Progress::Measuring(_) | Progress::ShapeDone)
    )
}

fn describe(step: &Step) -> String {
    match step {
        Step::Quality => "scoring quality: perplexity and top-1 agreement against f32".into(),
        Step::Tasks(w) => format!("running the workload's tasks on {w}"),
        Step::Profiling(settings, progress) => match progress {
            Progress::Starting => format!("{settings}: starting the engine"),
            Progress::Measuring(shape) => format!("{settings}: measuring {shape}"),
            Progress::ShapeDone => format!("{settings}: measured"),
            Progress::Probe { point, met } => format!(
                "{settings}: capacity probe {:.2} req/s -> TTFT p99 {:.0} ms, TPOT p99 {:.1} ms {}",
                point.rate_rps,
                point.ttft_p99_ms,
                point.tpot_p99_ms,
                if *met { "meets" } else { "misses" }
            ),
        },
        Step::Planning => "planning the day and simulating it".into(),
        Step::Replay { requests, seconds } => {
            format!("replaying {requests} requests over {seconds:.0} s through the gateway")
        }
    }
}

/// The human summary: verdict, per-class findings, quality, plan, and predicted against observed.
fn render(r: &PilotReport, id: i64, workload: &Path) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let d = &r.decision;
    let _ = writeln!(
        out,
        "pilot {id} of {} ({}):",
        r.workload,
        workload.display()
    );
    let _ = writeln!(
        out,
        "verdict: {} (exit {}) - {}",
        r.verdict, r.exit_code, r.summary
    );
    let _ = writeln!(
        out,
        "cost per month: ${:.2} planned vs ${:.2} all on the GPU baseline; savings ${:.2}",
        d.monthly_cost_usd, d.monthly_baseline_usd, d.monthly_savings_usd
    );
    for reason in &d.reasons {
        let _ = writeln!(out, "  - {reason}");
    }
    let _ = writeln!(
        out,
        "\n{:<14} {:>8} {:>10} {:>11} {:>11} {:>12}  notes",
        "class", "migrate", "CPU share", "attainment", "at 2x load", "GPU at 2x"
    );
    for c in &d.classes {
        let _ = writeln!(
            out,
            "{:<14} {:>8} {:>9.1}% {:>10.2}% {:>10.2}% {:>11.1}%  {}",
            c.class,
            if c.migrate { "yes" } else { "no" },
            c.cpu_share * 100.0,
            c.attainment * 100.0,
            c.attainment_2x * 100.0,
            c.gpu_share_2x * 100.0,
            c.reasons.join("; ")
        );
    }
    let _ = writeln!(
        out,
        "\nquality against f32 ({}):",
        strata_controller::quality::TEXT_ID
    );
    for g in &r.quality {
        let tasks = g
            .measured
            .task_pass_rate
            .map(|t| format!(", tasks {:.0}%", t * 100.0))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:<6} {} perplexity {:.3} ({:+.2}%), top-1 {:.1}%{tasks}{}",
            g.weights,
            if g.passed { "pass" } else { "FAIL" },
            g.measured.perplexity,
            g.perplexity_increase * 100.0,
            g.measured.top1_agreement * 100.0,
            if g.reasons.is_empty() {
                String::new()
            } else {
                format!(": {}", g.reasons.join("; "))
            }
        );
        for note in &g.notes {
            let _ = writeln!(out, "         {note}");
        }
    }
    if let Some(plan) = &r.plan {
        let _ = writeln!(
            out,
            "\nplan {}: {} on {} ({}), peak {} CPU instances, GPU share {:.1}%",
            plan.id,
            plan.config,
            plan.instance_type,
            plan.region,
            plan.peak_cpu_instances,
            plan.gpu_share * 100.0
        );
    }
    if let Some(replay) = r.replay.as_ref().filter(|r| r.requests == 0) {
        let _ = writeln!(
            out,
            "\nreplay: nothing to replay, the plan serves no traffic on CPU{}",
            if replay.with_gpu {
                ""
            } else {
                " (and no --gpu-endpoint was given)"
            }
        );
    }
    if let Some(replay) = r.replay.as_ref().filter(|r| r.requests > 0) {
        let _ = writeln!(
            out,
            "\nreplay: {} requests over {:.0} s at {:.2} req/s (plan hour {}, one host of {}), {} errors",
            replay.requests,
            replay.duration_s,
            replay.load.rate_rps,
            replay.load.hour,
            replay.config,
            replay.errors
        );
        let _ = writeln!(
            out,
            "{:<14} {:>5} {:>22} {:>22}",
            "class", "reqs", "E2E p99 obs/pred (s)", "TTFT p99 obs/pred (s)"
        );
        for c in &replay.classes {
            comparison_row(&mut out, &c.class, &c.p99);
        }
        comparison_row(&mut out, "all requests", &replay.all);
        if let Some(as_profiled) = &replay.all_as_profiled {
            comparison_row(&mut out, "  as profiled", as_profiled);
        }
        if let Some(c) = &replay.calibration {
            let ratio = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:.2}x"));
            let _ = writeln!(
                out,
                "calibration: {} requests over {:.0} s through the gateway, {}; engine steps {} (decode) and \
                 {} (prompts) of the profile's step model, which the prediction is scaled by",
                c.requests,
                c.duration_s,
                c.timing(),
                ratio(c.decode_over_profiled),
                ratio(c.prompt_over_profiled)
            );
        }
        if let Some(spread) = &replay.pace_spread {
            let band = |b: Option<strata_planner::pace::Band>| {
                b.map_or("-".into(), |b| format!("{:.2}-{:.2} s", b.low, b.high))
            };
            let _ = writeln!(
                out,
                "prediction: the median of {} simulations with the engine's pace spread by {:.1}% (for a whole \
                 run, and afresh every {:.0} s); p99 E2E {} and TTFT {} in the middle 80% of them",
                spread.runs,
                spread.sigma * 100.0,
                spread.block_s,
                band(replay.all.predicted_e2e_p99_band_s),
                band(replay.all.predicted_ttft_p99_band_s)
            );
        }
        let _ = writeln!(
            out,
            "replay cost ${:.4} observed vs ${:.4} predicted",
            replay.observed_cost_usd, replay.predicted_cost_usd
        );
        if let Some(pace) = &replay.host_pace {
            let _ = writeln!(
                out,
                "host pace ({}): {:.1} output tokens/s profiled, {:.1} before the replay, {:.1} after ({:.0}%)",
                pace.shape,
                pace.profiled_output_tokens_per_s,
                pace.before_replay_output_tokens_per_s,
                pace.after_replay_output_tokens_per_s,
                pace.replay_over_profiled * 100.0
            );
        }
    }
    let _ = writeln!(
        out,
        "\nthe report is stored as pilot {id}: `strata dashboard` shows it at /pilots"
    );
    out
}

/// One line of the replay table: requests, then p99 E2E and TTFT observed/predicted with the error.
fn comparison_row(out: &mut String, name: &str, c: &Comparison) {
    use std::fmt::Write as _;
    let err = |e: Option<f64>| e.map_or("-".into(), |e| format!("{:+.0}%", e * 100.0));
    let _ = writeln!(
        out,
        "{:<14} {:>5} {:>8.2}/{:<6.2} {:>6} {:>8.2}/{:<6.2} {:>6}",
        name,
        c.requests,
        c.observed_e2e_p99_s,
        c.predicted_e2e_p99_s,
        err(c.e2e_p99_error),
        c.observed_ttft_p99_s,
        c.predicted_ttft_p99_s,
        err(c.ttft_p99_error)
    );
}
