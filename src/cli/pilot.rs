//! `strata pilot`: should this workload move to CPU? Profiles the candidate configs, gates their quality,
//! plans and simulates the day, replays the busiest hour through a real gateway and engine, prints the
//! verdict and records the report; the exit status is the verdict (0 migrate, 3 partial, 4 stay).

use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{Context, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use strata_controller::{
    hardware,
    pilot::{self, GpuEndpoint, Pilot, Step},
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
    /// Offer the replay this share of the chosen config's measured capacity (0.65 is 65%) in place of
    /// the plan's busiest hour (overrides `pilot.replay_load`).
    #[arg(long, value_name = "SHARE")]
    replay_load: Option<f64>,
    /// The CPU engines' drain hold, run by the replay's engine and modelled by every prediction
    /// (overrides `pilot.drain_hold`; see `strata serve --drain-hold`).
    #[arg(long, value_name = "FACTOR")]
    drain_hold: Option<f64>,
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
        if let Some(share) = self.replay_load {
            spec.replay_load = Some(share);
        }
        if let Some(hold) = self.drain_hold {
            spec.drain_hold = hold;
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
            print!(
                "pilot {id} of {} ({}):\n{}\nthe report is stored as pilot {id}: `strata dashboard` shows it at /pilots\n",
                outcome.report.workload,
                self.workload.display(),
                outcome.report.to_text(),
                id = outcome.id.0,
            );
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
