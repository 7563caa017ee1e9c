//! Pilot evaluations: does this workload move to CPU? One run measures everything the planner's
//! [`strata_planner::pilot`] decisions need, on this host and this build:
//!
//! 1. the quality of each candidate weight type (perplexity and greedy top-1 agreement against f32, and the
//!    workload's own tasks when it lists some), gated by the workload's thresholds;
//! 2. the capacity of each config that passed (a real `strata serve` under the workload's mean request,
//!    reusing stored runs of this host and engine version);
//! 3. the hour-by-hour plan from those measurements, simulated at planned and at twice the traffic;
//! 4. a time-compressed replay of the plan's busiest hour per instance through a real `strata gateway` in
//!    front of a real engine (and the GPU baseline endpoint when one is given), compared with the
//!    simulator's prediction for the very same requests;
//! 5. the verdict, recorded with the report in the store.

use std::{collections::BTreeMap, path::Path, process::Command, time::Duration};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use strata_engine::serve::StepTimes;
use strata_planner::{
    PlannerError,
    catalog::Catalog,
    pace::{Band, PaceSpread, SpreadPrediction, predict_replay_over_paces},
    pilot::{
        self as decide, PairedTasks, PilotSpec, QualityGate, ReplayEvidence, ReplayLoad, TaskCheck,
        Verdict, VerdictInput, WeightQuality,
    },
    plan::{Degradation, Plan, PlanInput, plan},
    profile::{ConfigProfile, Scaling, ScalingRule},
    service::{ServiceCurve, StepModel},
    sim::{SimOptions, SimReport, simulate},
    workload::{GpuFallback, GpuPricing, TraceRecord, Workload},
};

use crate::{
    loadgen::{
        self, Api, Arrival, Lengths, LoadError, LoadSpec, Percentiles, ReplayRecord, Shape, Sla,
        TimedRequest,
    },
    planning::{self, PlanningError},
    process::ChildServer,
    profile::{
        self, CapacitySearch, EngineProcess, EngineSettings, NamedShape, Progress, RunContext,
        Sweep,
    },
    quality::{self, QualityError},
    step_fit,
    store::{PilotId, PilotStatus, PilotUpdate, StoreError, pilot_replay_source},
};

/// Version of the report's JSON layout (see the crate README).
pub const REPORT_SCHEMA_VERSION: u32 = 1;

/// Errors of a pilot.
#[derive(Debug, thiserror::Error)]
pub enum PilotError {
    /// The workload's `[pilot]` settings or the baseline are wrong.
    #[error("{0}")]
    Spec(String),
    /// Profiling failed.
    #[error(transparent)]
    Profile(#[from] profile::ProfileError),
    /// Quality scoring failed.
    #[error(transparent)]
    Quality(#[from] QualityError),
    /// Reading or recording plans failed.
    #[error(transparent)]
    Planning(#[from] PlanningError),
    /// The planner refused.
    #[error(transparent)]
    Planner(#[from] PlannerError),
    /// The load generator could not run.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A child server (engine or gateway) failed.
    #[error("{0}")]
    Server(String),
}

/// Result type of this module.
pub type Result<T, E = PilotError> = std::result::Result<T, E>;

/// The GPU baseline's OpenAI-compatible endpoint, when the replay should include it.
#[derive(Debug, Clone, Serialize)]
pub struct GpuEndpoint {
    /// Base URL (`http://host:port`).
    pub url: String,
    /// The model name it serves; the CPU engine is served under the same name.
    pub model: String,
    /// Environment variable with its API key.
    pub api_key_env: Option<String>,
}

/// What a pilot evaluates and with what.
pub struct Pilot<'a> {
    /// Store, host, model and engine version.
    pub ctx: RunContext<'a>,
    /// The `strata` binary (started as `serve` and `gateway`).
    pub exe: &'a Path,
    /// The model file.
    pub model_file: &'a Path,
    /// The workload, its GPU fallback set to the baseline.
    pub workload: &'a Workload,
    /// The `[pilot]` settings.
    pub spec: &'a PilotSpec,
    /// Prices.
    pub catalog: &'a Catalog,
    /// The GPU baseline endpoint, if any.
    pub gpu_endpoint: Option<&'a GpuEndpoint>,
    /// The store's URL as given on the command line, for the replay's gateway to record its decisions
    /// in (`None`: the gateway finds the store as the pilot did, from the environment or the default).
    pub database_url: Option<&'a str>,
}

/// Where a pilot is, for a progress display.
#[derive(Debug, Clone)]
pub enum Step {
    /// Scoring the weight types' quality.
    Quality,
    /// Running the workload's tasks on a weight type.
    Tasks(String),
    /// Profiling a config.
    Profiling(EngineSettings, Progress),
    /// Planning and simulating.
    Planning,
    /// Replaying `requests` requests over `seconds` through the gateway.
    Replay {
        /// Requests in the sample.
        requests: usize,
        /// Its length, seconds.
        seconds: f64,
    },
}

/// A finished pilot: its id in the store and its report.
#[derive(Debug, Clone)]
pub struct PilotOutcome {
    /// The stored pilot.
    pub id: PilotId,
    /// The report (also stored).
    pub report: PilotReport,
}

/// The report, as stored and printed with `--json`. Its layout is versioned by `schema_version`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PilotReport {
    /// [`REPORT_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The workload's name.
    pub workload: String,
    /// The verdict: `migrate`, `partial` or `stay`.
    pub verdict: String,
    /// The command's exit status for this verdict (0, 3, 4).
    pub exit_code: u8,
    /// One line.
    pub summary: String,
    /// Savings per month against the GPU baseline, $.
    pub monthly_savings_usd: f64,
    /// When it started and finished.
    pub started_at: DateTime<Utc>,
    /// See `started_at`.
    pub finished_at: DateTime<Utc>,
    /// The decision in full.
    pub decision: Verdict,
    /// What it ran on and with: host, versions, seed, settings, baseline.
    pub reproduce: Value,
    /// Each weight type's quality gate.
    pub quality: Vec<QualityGate>,
    /// Each config profiled.
    pub configs: Vec<ConfigResult>,
    /// The plan's id in the store and its headline figures (`None` when no config was left to plan).
    pub plan: Option<PlanSummary>,
    /// The plan simulated at planned traffic and at twice the traffic.
    pub simulation: SimulationPair,
    /// The replay against the prediction.
    pub replay: Option<ReplayReport>,
}

/// A failed pilot's report: what went wrong (the stored pilot says `failed`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FailedReport {
    /// [`REPORT_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The error, in words.
    pub error: String,
}

/// The headline figures of the plan a pilot recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanSummary {
    /// The plan's id in the store.
    pub id: i64,
    /// The chosen config (the planner's profile id).
    pub config: String,
    /// Its weight type.
    pub weights: String,
    /// The CPU instance type.
    pub instance_type: String,
    /// Its region.
    pub region: String,
    /// How the measured host carries over to the instance type.
    pub scaling: Scaling,
    /// The plan's cost per day, $.
    pub cost_per_day_usd: f64,
    /// All traffic on the GPU baseline per day, $.
    pub all_gpu_cost_per_day_usd: f64,
    /// Baseline minus plan per day, $.
    pub savings_per_day_usd: f64,
    /// Share of requests sent to GPU.
    pub gpu_share: f64,
    /// Most CPU instances in any hour.
    pub peak_cpu_instances: u32,
    /// Classes whose SLA the plan misses, and by how much.
    pub degraded: Vec<Degradation>,
}

/// One profiled config.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConfigResult {
    /// Its settings, as `q8_0 t2 b8 kv128 numa=none`.
    pub config: String,
    /// The planner's id of its profile.
    pub profile_id: String,
    /// Highest Poisson rate meeting the capacity SLA (this run's search; `None` when reused).
    pub capacity_rps: Option<f64>,
    /// True when every measurement came from the store.
    pub reused: bool,
    /// The engine's steps as fitted from its timings during the capacity search the plan used.
    pub step_model: Option<StepModel>,
}

/// The plan simulated twice.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimulationPair {
    /// At planned traffic.
    pub planned: SimReport,
    /// At twice the traffic, same pool.
    pub double: SimReport,
}

/// The replay and its prediction.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The load sampled.
    pub load: ReplayLoad,
    /// Seconds replayed.
    pub duration_s: f64,
    /// Requests sent.
    pub requests: usize,
    /// Requests that failed.
    pub errors: usize,
    /// The config served.
    pub config: String,
    /// True when a GPU endpoint took part.
    pub with_gpu: bool,
    /// How fast the host ran the profiling shape when profiled and around the replay.
    pub host_pace: Option<HostPace>,
    /// Every request together, observed against predicted.
    pub all: Comparison,
    /// Per class, observed against predicted.
    pub classes: Vec<ClassComparison>,
    /// The largest |relative error| of a class's p99 E2E (classes with at least 20 requests).
    pub worst_e2e_p99_error: Option<f64>,
    /// The replay's cost: the CPU host for its duration plus GPU requests at the baseline's price, $.
    pub observed_cost_usd: f64,
    /// The same from the simulation's routing, $.
    pub predicted_cost_usd: f64,
    /// The engine's steps during the replay, fitted as profiling fits them: set beside the profile's
    /// step model (`configs[].step_model`), it tells whether the engine ran slower under the replay
    /// (with the gateway and the load generator on the same cores) than under the capacity probes.
    pub step_model: Option<StepModel>,
    /// Every request against the simulator run again with the replay's own step model in place of
    /// the profile's: the simulator's error with the host's drift between profiling and replay taken
    /// out (a diagnosis, not a prediction: it reads the replay it is compared with).
    pub all_with_replay_steps: Option<Comparison>,
    /// The engine's steps under calibration samples through the replay's gateway right before and
    /// right after the replay, on which the prediction in `all` and `classes` runs; `None` when there
    /// was none (no step model in the profile, or too few steps).
    pub calibration: Option<Calibration>,
    /// The spread of the engine's pace that the prediction in `all` and `classes` is the median over
    /// (from the calibration's blocks); `None`: one simulation at the profile's pace.
    pub pace_spread: Option<PaceSpread>,
    /// Every request against the prediction from the profile's step model as profiled, over the same
    /// spread of paces (set when a calibration scaled the one in `all`).
    pub all_as_profiled: Option<Comparison>,
}

/// Seconds of each calibration sample (one right before the replay, one right after it), at most.
const CALIBRATION_S: f64 = 40.0;
/// Seconds of each block of the calibration sample whose pace is read apart.
const CALIBRATION_BLOCK_S: f64 = 10.0;
/// Spread of the engine's pace the replay is predicted over when the calibration measured none, and
/// the least and most taken from a measured one (a sample's few blocks can happen to agree closely,
/// and one disturbed block should not spread the prediction over half the range).
const DEFAULT_PACE_SPREAD: f64 = 0.03;
const MIN_PACE_SPREAD: f64 = 0.02;
const MAX_PACE_SPREAD: f64 = 0.15;
/// Simulations the replay's prediction averages over the spread of paces.
const PACE_RUNS: u32 = 15;
/// Added to the pilot's seed for the calibration sample before the replay (and one more for the one
/// after it), so that neither is the replayed one and the engine's prefix cache serves neither from
/// the other.
const CALIBRATION_SEED: u64 = 0x5eed;
/// Added to the pilot's seed for the pace measurements around the replay: with the replay's own seed
/// their prompts would open as the replay's first prompt does, and the engine's prefix cache would
/// serve that prompt from them.
const PACE_SEED: u64 = 0xface;

/// Two more samples of the replay's load (other seeds), sent through the replay's gateway right before
/// the replay and right after it. The engine then shares the pilot host's cores with the gateway and
/// the load generator, which capacity probes straight to the engine do not see, and it runs its steps
/// a few percent slower. A shared host's pace also drifts within minutes, so the samples bracket the
/// replay as calibration standards bracket a measurement: pooled, they stand for the pace of the
/// minutes between them, and neither reads the replay. The replay's prediction runs the simulator on
/// the profile's step model scaled by the samples' pooled ratios (their decode and prompt steps against
/// the profile's), with the pace spread as widely as the samples' blocks moved (see
/// [`strata_planner::pace`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Calibration {
    /// Seconds of the samples together.
    pub duration_s: f64,
    /// Requests in them together.
    pub requests: usize,
    /// Each sample on its own, in the order they ran.
    pub samples: Vec<CalibrationSample>,
    /// Decode-only steps' seconds over the profile's step model's (above 1: slower).
    pub decode_over_profiled: Option<f64>,
    /// Prompt steps' seconds beyond their decode part over the model's.
    pub prompt_over_profiled: Option<f64>,
    /// Seconds of each block the sample's pace was read over.
    pub block_s: f64,
    /// Each block's decode ratio to the profile (blocks with too few decode steps left out).
    pub block_decode_over_profiled: Vec<f64>,
    /// The blocks' standard deviation about their own sample's mean, pooled, over the mean of all
    /// blocks (`None` without a sample of two blocks or more).
    pub pace_spread: Option<f64>,
    /// The step model the replay is predicted with: the profile's, scaled by the two ratios.
    pub step_model: StepModel,
}

/// When a calibration sample ran, against the replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleTime {
    /// Right before the replay.
    BeforeReplay,
    /// Right after the replay.
    AfterReplay,
}

impl Calibration {
    /// When its samples ran against the replay, in words (see [`sample_timing`]).
    pub fn timing(&self) -> &'static str {
        let ran = |t| self.samples.iter().any(|s| s.when == t);
        sample_timing(ran(SampleTime::BeforeReplay), ran(SampleTime::AfterReplay))
    }
}

/// When calibration samples ran against the replay, in words, from whether one ran before it and one
/// after it (reports of one sample before the replay list no samples, and read as before).
pub fn sample_timing(before: bool, after: bool) -> &'static str {
    match (before, after) {
        (true, true) => "half right before the replay and half right after it",
        (false, true) => "right after the replay",
        _ => "right before the replay",
    }
}

/// One calibration sample: when it ran, and how the engine's steps ran in it against the profile.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CalibrationSample {
    /// Before or after the replay.
    pub when: SampleTime,
    /// Seconds of the sample.
    pub duration_s: f64,
    /// Requests in it.
    pub requests: usize,
    /// Decode-only steps' seconds over the profile's step model's (above 1: slower).
    pub decode_over_profiled: Option<f64>,
    /// Prompt steps' seconds beyond their decode part over the model's.
    pub prompt_over_profiled: Option<f64>,
}

/// The host's speed on the profiling shape (closed loop at the batch size, straight to the engine):
/// when the config was profiled, right before the replay and right after it. The prediction comes from
/// the profile as measured; on a shared host whose speed drifts between profiling and replay, these
/// figures tell a reviewer how much of an error is the host's rather than the simulator's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostPace {
    /// The shape measured.
    pub shape: String,
    /// Output tokens/s when the config was profiled (this run or a stored one).
    pub profiled_output_tokens_per_s: f64,
    /// Output tokens/s right before the replay.
    pub before_replay_output_tokens_per_s: f64,
    /// Output tokens/s right after the replay.
    pub after_replay_output_tokens_per_s: f64,
    /// Mean of the speeds before and after the replay over the profiled speed: below 1 the host ran
    /// slower around the replay than when profiled.
    pub replay_over_profiled: f64,
}

/// p99s of a set of replayed requests, observed against predicted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    /// Requests.
    pub requests: usize,
    /// Observed p99 TTFT, s.
    pub observed_ttft_p99_s: f64,
    /// Predicted p99 TTFT, s (over a spread of paces, the runs' median).
    pub predicted_ttft_p99_s: f64,
    /// The 10th to 90th percentile of the runs' p99 TTFT over a spread of paces, s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_ttft_p99_band_s: Option<Band>,
    /// Observed p99 E2E, s.
    pub observed_e2e_p99_s: f64,
    /// Predicted p99 E2E, s (over a spread of paces, the runs' median).
    pub predicted_e2e_p99_s: f64,
    /// The 10th to 90th percentile of the runs' p99 E2E over a spread of paces, s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_e2e_p99_band_s: Option<Band>,
    /// (predicted - observed) / observed of p99 E2E.
    pub e2e_p99_error: Option<f64>,
    /// (predicted - observed) / observed of p99 TTFT.
    pub ttft_p99_error: Option<f64>,
}

impl Comparison {
    /// Observed p99s of `records` (failed ones left out) against `prediction`'s for every request
    /// (`class` is `None`) or for one class, with the prediction's bands when it spread over paces.
    fn against(
        records: &[&ReplayRecord],
        prediction: &SpreadPrediction,
        class: Option<usize>,
    ) -> Self {
        let (predicted_ttft_s, predicted_e2e_s, bands) = match class {
            None => (
                prediction.point.ttft_p99_s,
                prediction.point.e2e_p99_s,
                Some(&prediction.all),
            ),
            Some(c) => {
                let point = prediction.point.classes.get(c);
                (
                    point.map_or(0.0, |m| m.ttft_p99_s),
                    point.map_or(0.0, |m| m.e2e_p99_s),
                    prediction.classes.get(c),
                )
            }
        };
        let bands = bands.filter(|_| prediction.paces.len() > 1);
        let ok = || records.iter().filter(|r| r.record.error.is_none());
        let ttft = Percentiles::of(ok().map(|r| r.record.ttft_s)).p99 / 1000.0;
        let e2e = Percentiles::of(ok().map(|r| r.record.e2e_s)).p99 / 1000.0;
        Comparison {
            requests: records.len(),
            observed_ttft_p99_s: ttft,
            predicted_ttft_p99_s: predicted_ttft_s,
            predicted_ttft_p99_band_s: bands.map(|b| b.ttft_s),
            observed_e2e_p99_s: e2e,
            predicted_e2e_p99_s: predicted_e2e_s,
            predicted_e2e_p99_band_s: bands.map(|b| b.e2e_s),
            e2e_p99_error: decide::relative_error(predicted_e2e_s, e2e),
            ttft_p99_error: decide::relative_error(predicted_ttft_s, ttft),
        }
    }
}

/// One class in the replay: its p99s observed against predicted (flattened into the class's JSON object),
/// what the gateway sent to GPU and the SLA attainment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClassComparison {
    /// Class name.
    pub class: String,
    /// Its requests' p99s, observed and predicted.
    #[serde(flatten)]
    pub p99: Comparison,
    /// Requests the gateway sent to GPU.
    pub gpu_requests: usize,
    /// Share meeting the class SLA, observed.
    pub observed_attainment: f64,
    /// Share meeting the class SLA, predicted.
    pub predicted_attainment: f64,
}

/// Runs the pilot and records it (as failed, with the error, when a step fails).
///
/// # Errors
/// Any step's error; the stored pilot then says `failed`.
pub async fn run(pilot: &Pilot<'_>, mut on_step: impl FnMut(Step)) -> Result<PilotOutcome> {
    pilot
        .spec
        .validate(&pilot.workload.name)
        .map_err(|e| PilotError::Spec(e.to_string()))?;
    let store = pilot.ctx.store;
    // The prices the pilot costs its plan with, so that the dashboard costs the same configs alike.
    let prices = planning::record_catalog_prices(store, pilot.catalog).await?;
    tracing::debug!(
        inserted = prices.inserted,
        already_recorded = prices.already_recorded,
        "the pilot's prices are in the store"
    );
    let workload_row = planning::ensure_workload(store, pilot.workload).await?;
    let row = store.insert_pilot(workload_row.id).await?;
    let status = |status, verdict: Option<String>, report: Option<Value>| PilotUpdate {
        status,
        verdict,
        report,
    };
    store
        .update_pilot(row.id, &status(PilotStatus::Running, None, None))
        .await?;
    match evaluate(pilot, &mut on_step).await {
        Ok(report) => {
            let json =
                serde_json::to_value(&report).map_err(|e| PilotError::Server(e.to_string()))?;
            store
                .update_pilot(
                    row.id,
                    &status(PilotStatus::Done, Some(report.summary.clone()), Some(json)),
                )
                .await?;
            Ok(PilotOutcome { id: row.id, report })
        }
        Err(e) => {
            let failed = FailedReport {
                schema_version: REPORT_SCHEMA_VERSION,
                error: e.to_string(),
            };
            let report = serde_json::to_value(&failed).unwrap_or_else(|_| json!({}));
            if let Err(store_error) = store
                .update_pilot(row.id, &status(PilotStatus::Failed, None, Some(report)))
                .await
            {
                tracing::warn!(%store_error, "could not record the pilot's failure");
            }
            Err(e)
        }
    }
}

async fn evaluate(pilot: &Pilot<'_>, on_step: &mut impl FnMut(Step)) -> Result<PilotReport> {
    let started_at = Utc::now();
    let spec = pilot.spec;
    let threads = spec.threads.map_or_else(
        || pilot.ctx.hardware.threads.max(1) as usize,
        |t| t as usize,
    );
    on_step(Step::Quality);
    let measured = measure_quality(pilot, threads, on_step).await?;
    let gates: Vec<QualityGate> = measured
        .iter()
        .map(|q| decide::gate_quality(q, &spec.quality))
        .collect();
    let passing: Vec<&str> = gates
        .iter()
        .filter(|g| g.passed)
        .map(|g| g.weights.as_str())
        .collect();
    let candidates: Vec<EngineSettings> = candidates(spec, threads)
        .into_iter()
        .filter(|s| passing.contains(&s.weights.as_str()))
        .collect();
    let mut configs = Vec::new();
    let mut paces = BTreeMap::new();
    let sweep = profiling_sweep(pilot);
    for settings in &candidates {
        let outcome = profile::run_config(
            &pilot.ctx,
            pilot.exe,
            pilot.model_file,
            &sweep,
            settings,
            false,
            |p| on_step(Step::Profiling(settings.clone(), p)),
        )
        .await?;
        if let Some(run) = outcome.runs.iter().find(|r| r.shape == PACE_SHAPE) {
            paces.insert(settings.to_string(), run.report.output_tokens_per_s);
        }
        configs.push(ConfigResult {
            config: settings.to_string(),
            profile_id: profile_id(pilot, settings),
            capacity_rps: outcome.capacity_rps,
            reused: outcome.runs.iter().all(|r| r.reused) && outcome.capacity_rps.is_none(),
            step_model: None,
        });
    }
    on_step(Step::Planning);
    let profiles = pilot_profiles(pilot, &configs).await?;
    for config in &mut configs {
        config.step_model = profiles
            .iter()
            .find(|p| p.id == config.profile_id)
            .and_then(|p| p.step_model.clone());
    }
    let reproduce = reproduce(pilot, threads);
    if profiles.is_empty() {
        return Ok(stay_without_plan(
            pilot, started_at, reproduce, gates, configs,
        ));
    }
    let mut input = PlanInput::new(pilot.workload.clone(), pilot.catalog.clone(), profiles)?;
    input.seed = spec.seed;
    let plan = plan(&input)?;
    let (_, plan_row) = planning::record_plan(pilot.ctx.store, pilot.workload, &plan).await?;
    let planned = match plan.validation.clone() {
        Some(v) => v,
        None => simulate(
            &plan,
            pilot.workload,
            &input.profiles,
            spec.seed,
            &SimOptions::default(),
        )?,
    };
    let double = simulate(
        &plan,
        pilot.workload,
        &input.profiles,
        spec.seed,
        &SimOptions {
            traffic_scale: 2.0,
            ..SimOptions::default()
        },
    )?;
    let replay = replay(pilot, &plan, &input.profiles, &paces, on_step).await?;
    let evidence: Vec<ReplayEvidence> = replay
        .classes
        .iter()
        .map(|c| ReplayEvidence {
            class: c.class.clone(),
            requests: c.p99.requests - c.gpu_requests,
            observed_attainment: c.observed_attainment,
            observed_e2e_p99_s: c.p99.observed_e2e_p99_s,
            rate_rps: replay.load.rate_rps,
        })
        .collect();
    let decision = decide::verdict(&VerdictInput {
        plan: &plan,
        at_planned: &planned,
        at_double: &double,
        gates: &gates,
        spec,
        replay: &evidence,
    });
    Ok(PilotReport {
        schema_version: REPORT_SCHEMA_VERSION,
        workload: pilot.workload.name.clone(),
        verdict: verdict_name(&decision),
        exit_code: decision.kind.exit_code(),
        summary: decision.summary.clone(),
        monthly_savings_usd: decision.monthly_savings_usd,
        started_at,
        finished_at: Utc::now(),
        reproduce,
        quality: gates,
        configs,
        plan: Some(plan_summary(&plan, plan_row.id.0)),
        simulation: SimulationPair { planned, double },
        replay: Some(replay),
        decision,
    })
}

fn verdict_name(v: &Verdict) -> String {
    serde_json::to_value(v.kind)
        .ok()
        .and_then(|k| k.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The verdict when no config is left to plan with (every weight type failed the quality gate).
fn stay_without_plan(
    pilot: &Pilot<'_>,
    started_at: DateTime<Utc>,
    reproduce: Value,
    gates: Vec<QualityGate>,
    configs: Vec<ConfigResult>,
) -> PilotReport {
    let decision = decide::stay_without_plan(pilot.workload, &gates);
    let empty = SimReport::empty(pilot.spec.seed);
    PilotReport {
        schema_version: REPORT_SCHEMA_VERSION,
        workload: pilot.workload.name.clone(),
        verdict: verdict_name(&decision),
        exit_code: decision.kind.exit_code(),
        summary: decision.summary.clone(),
        monthly_savings_usd: 0.0,
        started_at,
        finished_at: Utc::now(),
        reproduce,
        quality: gates,
        configs,
        plan: None,
        simulation: SimulationPair {
            planned: empty.clone(),
            double: empty,
        },
        replay: None,
        decision,
    }
}

/// Each weight type's settings: every `weights` x `max_batch` of the spec on `threads`.
fn candidates(spec: &PilotSpec, threads: usize) -> Vec<EngineSettings> {
    let mut out = Vec::new();
    for weights in &spec.weights {
        for &max_batch in &spec.max_batch {
            out.push(EngineSettings {
                weights: weights.clone(),
                threads,
                max_batch: max_batch as usize,
                numa: "none".into(),
                kv_mem_mib: spec.kv_mem_mib as usize,
            });
        }
    }
    out
}

/// Class-weighted mean of a length.
fn mix_mean(
    workload: &Workload,
    length: impl Fn(&strata_planner::workload::RequestClass) -> f64,
) -> f64 {
    let total: f64 = workload.classes.iter().map(|c| c.share.max(0.0)).sum();
    if total <= 0.0 {
        let n = workload.classes.len().max(1) as f64;
        return workload.classes.iter().map(&length).sum::<f64>() / n;
    }
    workload
        .classes
        .iter()
        .map(|c| c.share.max(0.0) * length(c))
        .sum::<f64>()
        / total
}

/// The sweep the pilot profiles each config with: the workload's mean request, closed-loop at the batch
/// size, then a capacity search at the tightest class SLA.
fn profiling_sweep(pilot: &Pilot<'_>) -> Sweep {
    let w = pilot.workload;
    let (ttft_ms, tpot_ms) = capacity_sla(w);
    let shape = profiling_shape(w, pilot.spec);
    Sweep {
        model: pilot.ctx.model.name.clone(),
        weights: Vec::new(),
        threads: Vec::new(),
        max_batch: Vec::new(),
        numa: Vec::new(),
        kv_mem_mib: Vec::new(),
        shapes: vec![shape],
        sla: Sla {
            ttft_ms: ttft_ms.is_finite().then_some(ttft_ms),
            tpot_ms: tpot_ms.is_finite().then_some(tpot_ms),
            e2e_ms: None,
        },
        capacity: Some(CapacitySearch {
            ttft_p99_ms: if ttft_ms.is_finite() {
                ttft_ms
            } else {
                10_000.0
            },
            tpot_p99_ms: if tpot_ms.is_finite() {
                tpot_ms
            } else {
                1_000.0
            },
            shape: PACE_SHAPE.into(),
            probe_requests: pilot.spec.probe_requests as usize,
            bisections: 1,
            confirmations: 1,
            min_probe_s: 10.0,
        }),
        seed: pilot.spec.seed,
        quality: false,
    }
}

/// Name of the closed-loop shape every config is profiled with first, which also measures the host's
/// pace around the replay.
const PACE_SHAPE: &str = "pilot-mix";

/// The workload's mean request, closed-loop at the largest batch size.
fn profiling_shape(w: &Workload, spec: &PilotSpec) -> NamedShape {
    let prompt = mix_mean(w, |c| c.prompt_tokens.mean()).round().max(1.0) as usize;
    let output = mix_mean(w, |c| c.output_tokens.mean()).round().max(2.0) as usize;
    let batch = spec.max_batch.iter().copied().max().unwrap_or(8) as usize;
    NamedShape {
        name: PACE_SHAPE.into(),
        prompt_tokens: Lengths::Fixed(prompt),
        output_tokens: Lengths::Fixed(output),
        arrival: Arrival::Closed { concurrency: batch },
        requests: 2 * batch,
        duration_s: None,
        warmup: 2,
    }
}

/// The capacity search's p99 TTFT and TPOT targets, ms: the tightest class TTFT (half an E2E bound when
/// a class has none), and the tightest E2E bound spread over the class's p99 output length.
fn capacity_sla(w: &Workload) -> (f64, f64) {
    let ttft_ms = w
        .classes
        .iter()
        .filter_map(|c| c.sla.ttft_p99_s.or(c.sla.e2e_p99_s.map(|e| e / 2.0)))
        .fold(f64::INFINITY, f64::min)
        * 1000.0;
    let tpot_ms = w
        .classes
        .iter()
        .filter_map(|c| c.sla.e2e_p99_s.map(|e| e / c.output_tokens.p99().max(1.0)))
        .fold(f64::INFINITY, f64::min)
        * 1000.0;
    (ttft_ms, tpot_ms)
}

fn profile_id(pilot: &Pilot<'_>, s: &EngineSettings) -> String {
    planning::profile_id(
        &pilot.ctx.model.name,
        &s.weights,
        s.threads as i64,
        s.max_batch as i64,
        pilot.ctx.hardware.id,
    )
}

/// The stored profiles of the configs profiled, on this host.
async fn pilot_profiles(pilot: &Pilot<'_>, configs: &[ConfigResult]) -> Result<Vec<ConfigProfile>> {
    let all = planning::profiles_from_store(pilot.ctx.store, Some(&pilot.ctx.model.name)).await?;
    Ok(all
        .into_iter()
        .filter(|p| configs.iter().any(|c| c.profile_id == p.id))
        .collect())
}

/// Perplexity and top-1 against f32 for each weight type, plus the tasks when the workload has some.
async fn measure_quality(
    pilot: &Pilot<'_>,
    threads: usize,
    on_step: &mut impl FnMut(Step),
) -> Result<Vec<WeightQuality>> {
    let mut weights = pilot.spec.weights.clone();
    weights.dedup();
    let mut scored = weights.clone();
    if !scored.iter().any(|w| w == "f32") {
        scored.push("f32".into());
    }
    let path = pilot.model_file.to_path_buf();
    let scores = tokio::task::spawn_blocking(move || quality::score(&path, &scored, threads))
        .await
        .map_err(|e| PilotError::Server(format!("the quality scorer stopped: {e}")))??;
    let reference = scores
        .iter()
        .find(|s| s.weights == "f32")
        .map_or(0.0, |s| s.perplexity);
    for settings in candidates(pilot.spec, threads) {
        let config = profile::ensure_config(pilot.ctx.store, pilot.ctx.model, &settings).await?;
        if let Some(score) = scores.iter().find(|s| s.weights == settings.weights) {
            quality::record(pilot.ctx.store, &config, score).await?;
        }
    }
    let mut outcomes: BTreeMap<String, Vec<bool>> = BTreeMap::new();
    if !pilot.spec.tasks.is_empty() {
        for w in weights.iter().chain(std::iter::once(&"f32".to_owned())) {
            if outcomes.contains_key(w) {
                continue;
            }
            on_step(Step::Tasks(w.clone()));
            outcomes.insert(w.clone(), task_outcomes(pilot, w, threads).await?);
        }
    }
    let rate = |o: &Vec<bool>| o.iter().filter(|p| **p).count() as f64 / o.len().max(1) as f64;
    let reference_tasks = outcomes.get("f32");
    Ok(weights
        .iter()
        .filter_map(|w| {
            let s = scores.iter().find(|s| &s.weights == w)?;
            let tasks = outcomes.get(w);
            Some(WeightQuality {
                weights: w.clone(),
                reference_weights: "f32".into(),
                perplexity: s.perplexity,
                reference_perplexity: reference,
                top1_agreement: s.top1_agreement.unwrap_or(1.0),
                task_pass_rate: tasks.map(rate),
                reference_task_pass_rate: reference_tasks.map(rate),
                tasks: tasks
                    .zip(reference_tasks)
                    .map(|(c, r)| PairedTasks::new(c.clone(), r.clone())),
            })
        })
        .collect())
}

/// Whether a `weights` engine answers each of the workload's tasks as expected (greedy chat
/// completions, one at a time so that every weight type answers each task alone), in task order.
async fn task_outcomes(pilot: &Pilot<'_>, weights: &str, threads: usize) -> Result<Vec<bool>> {
    let settings = EngineSettings {
        weights: weights.to_owned(),
        threads,
        max_batch: 4,
        numa: "none".into(),
        kv_mem_mib: pilot.spec.kv_mem_mib as usize,
    };
    let server = EngineProcess::start(pilot.exe, pilot.model_file, &settings).await?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .map_err(|e| PilotError::Server(e.to_string()))?;
    let mut outcomes = Vec::with_capacity(pilot.spec.tasks.len());
    for task in &pilot.spec.tasks {
        let answer = ask(&client, &server.base_url, task).await?;
        let passed = task.passed_by(&answer);
        tracing::debug!(weights, prompt = %task.prompt, %answer, passed, "task answered");
        outcomes.push(passed);
    }
    Ok(outcomes)
}

async fn ask(client: &reqwest::Client, base_url: &str, task: &TaskCheck) -> Result<String> {
    let body = json!({
        "model": profile::SERVED_NAME,
        "messages": [{"role": "user", "content": task.prompt}],
        "max_tokens": task.max_tokens,
        "temperature": 0,
    });
    let response: Value = client
        .post(format!("{base_url}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| PilotError::Server(format!("task prompt: {e}")))?
        .json()
        .await
        .map_err(|e| PilotError::Server(format!("task answer: {e}")))?;
    Ok(response["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

/// Replays the plan's busiest hour per instance through a real gateway and engine, and compares.
async fn replay(
    pilot: &Pilot<'_>,
    plan: &Plan,
    profiles: &[ConfigProfile],
    profiled_paces: &BTreeMap<String, f64>,
    on_step: &mut impl FnMut(Step),
) -> Result<ReplayReport> {
    let spec = pilot.spec;
    let with_gpu = pilot.gpu_endpoint.is_some();
    let load = decide::replay_load(plan, with_gpu);
    let trace = decide::replay_trace(pilot.workload, &load, spec.replay_s, spec.seed);
    // The prediction on `steps` in place of the chosen profile's step model (none: as profiled), over
    // `spread` (none: one simulation).
    let predict_on = |steps: Option<&StepModel>, spread: Option<PaceSpread>| {
        predict_replay_over_paces(
            plan,
            pilot.workload,
            profiles,
            &trace,
            with_gpu,
            spec.seed,
            steps,
            spread.unwrap_or(PaceSpread::NONE),
        )
    };
    let profile = profiles
        .iter()
        .find(|p| p.id == plan.chosen.config)
        .ok_or_else(|| PilotError::Server(format!("no profile {}", plan.chosen.config)))?;
    let settings = EngineSettings {
        weights: profile.weights.clone(),
        threads: profile.threads as usize,
        max_batch: profile.max_batch as usize,
        numa: "none".into(),
        kv_mem_mib: spec.kv_mem_mib as usize,
    };
    if trace.is_empty() {
        // The plan serves nothing on CPU (and there is no GPU endpoint): nothing to replay.
        return Ok(compare(
            pilot,
            plan,
            load,
            &trace,
            &[],
            &predict_on(None, None)?,
            None,
            settings,
            0.0,
        ));
    }
    let served = pilot
        .gpu_endpoint
        .map_or(profile::SERVED_NAME, |g| g.model.as_str());
    let engine = EngineProcess::start_named(pilot.exe, pilot.model_file, &settings, served).await?;
    let host_hourly = plan.chosen.hourly_cost / plan.chosen.scaling.factor.max(1e-9);
    let config_toml = gateway_config(
        pilot.workload,
        pilot.gpu_endpoint.map(|g| (g, &plan.gpu_fallback)),
        profile,
        &engine.base_url,
        served,
        host_hourly,
    );
    let dir = tempfile::tempdir().map_err(|e| PilotError::Server(e.to_string()))?;
    let config_path = dir.path().join("pilot-gateway.toml");
    std::fs::write(&config_path, config_toml).map_err(|e| PilotError::Server(e.to_string()))?;
    let mut command = Command::new(pilot.exe);
    if let Some(url) = pilot.database_url {
        // Through the environment: a URL on the command line would show its password to `ps`.
        command.env(crate::store::ENV_DATABASE_URL, url);
    }
    // The replay's decisions go to the store under the pilot's name, apart from live traffic.
    command
        .arg("gateway")
        .arg("--config")
        .arg(&config_path)
        .args(["--listen", "127.0.0.1:0", "--decision-source"])
        .arg(pilot_replay_source(&pilot.workload.name));
    let gateway = ChildServer::spawn(command, "`strata gateway`")
        .await
        .map_err(PilotError::Server)?;
    let timed = timed_requests(pilot.workload, &trace);
    let load_spec = LoadSpec {
        base_url: gateway.base_url.clone(),
        model: served.to_owned(),
        api_key: None,
        api: Api::Completions,
        shape: Shape {
            prompt_tokens: Lengths::Fixed(1),
            output_tokens: Lengths::Fixed(1),
            arrival: Arrival::Closed { concurrency: 1 },
            requests: 1,
            duration_s: None,
            warmup: 0,
        },
        token_prompts: true,
        ignore_eos: true,
        sla: Sla::default(),
        seed: spec.seed,
        timeout: Duration::from_secs(600),
    };
    // Two unmeasured requests first: the engine's first steps fault its weights in.
    let warmup: Vec<TimedRequest> = timed
        .iter()
        .take(2)
        .cloned()
        .map(|mut r| {
            r.at_s = 0.0;
            r
        })
        .collect();
    let warmup_spec = LoadSpec {
        seed: spec.seed.wrapping_add(1),
        ..load_spec.clone()
    };
    loadgen::replay(&warmup_spec, &warmup).await?;
    // Without a step model in the profile there is nothing to calibrate, and no samples are sent.
    let sample = async |when| match &profile.step_model {
        Some(_) => sample_steps(pilot, &engine, &load, &load_spec, when).await,
        None => Ok(None),
    };
    let sample_before = sample(SampleTime::BeforeReplay).await?;
    let pace_shape = profiling_shape(pilot.workload, spec);
    let pace_seed = spec.seed.wrapping_add(PACE_SEED);
    let before = measure_pace(&engine.base_url, served, &pace_shape, pace_seed).await?;
    on_step(Step::Replay {
        requests: timed.len(),
        seconds: spec.replay_s,
    });
    let steps_before = engine.step_times().await;
    let records = loadgen::replay(&load_spec, &timed).await?;
    let step_model = engine.step_model_since(steps_before).await;
    let sample_after = sample(SampleTime::AfterReplay).await?;
    let after = measure_pace(&engine.base_url, served, &pace_shape, pace_seed).await?;
    drop(gateway);
    drop(engine);
    let samples: Vec<SampleSteps> = [sample_before, sample_after]
        .into_iter()
        .flatten()
        .collect();
    let calibration = profile
        .step_model
        .as_ref()
        .and_then(|model| calibration(&samples, model));
    let spread = calibration.as_ref().map(|c| PaceSpread {
        sigma: c
            .pace_spread
            .unwrap_or(DEFAULT_PACE_SPREAD)
            .clamp(MIN_PACE_SPREAD, MAX_PACE_SPREAD),
        runs: PACE_RUNS,
        block_s: CALIBRATION_BLOCK_S,
    });
    let predicted = predict_on(calibration.as_ref().map(|c| &c.step_model), spread)?;
    let host_pace = profiled_paces
        .get(&settings.to_string())
        .map(|&profiled| HostPace {
            shape: pace_shape.name.clone(),
            profiled_output_tokens_per_s: profiled,
            before_replay_output_tokens_per_s: before,
            after_replay_output_tokens_per_s: after,
            replay_over_profiled: (before + after) / 2.0 / profiled,
        });
    let report = compare(
        pilot,
        plan,
        load,
        &trace,
        &records,
        &predicted,
        host_pace,
        settings,
        host_hourly,
    );
    let everything: Vec<&ReplayRecord> = records.iter().collect();
    let all_with_replay_steps = match &step_model {
        Some(steps) => Some(Comparison::against(
            &everything,
            &predict_on(Some(steps), None)?,
            None,
        )),
        None => None,
    };
    let all_as_profiled = match spread {
        Some(spread) => Some(Comparison::against(
            &everything,
            &predict_on(None, Some(spread))?,
            None,
        )),
        None => None,
    };
    Ok(ReplayReport {
        step_model,
        all_with_replay_steps,
        calibration,
        pace_spread: spread,
        all_as_profiled,
        ..report
    })
}

/// The workload's trace records as the load generator replays them.
fn timed_requests(workload: &Workload, trace: &[TraceRecord]) -> Vec<TimedRequest> {
    trace
        .iter()
        .map(|r| TimedRequest {
            at_s: r.t_s,
            class: workload.classes[r.class].name.clone(),
            prompt_tokens: r.prompt_tokens as usize,
            output_tokens: r.output_tokens as usize,
        })
        .collect()
}

/// The engine's steps under one calibration sample, block by block.
struct SampleSteps {
    when: SampleTime,
    duration_s: f64,
    requests: usize,
    blocks: Vec<StepTimes>,
}

impl SampleSteps {
    /// Every step of the sample: its blocks added up.
    fn total(&self) -> StepTimes {
        let mut total = StepTimes::default();
        self.blocks.iter().for_each(|b| total.add(b));
        total
    }
}

/// Sends a sample of the replay's load (a seed of its own, [`CALIBRATION_S`] at most) through the
/// replay's gateway and reads the engine's steps under it, as a whole and every
/// [`CALIBRATION_BLOCK_S`]; `None` when the sample is empty or the engine's step timings cannot be
/// read.
async fn sample_steps(
    pilot: &Pilot<'_>,
    engine: &EngineProcess,
    load: &ReplayLoad,
    load_spec: &LoadSpec,
    when: SampleTime,
) -> Result<Option<SampleSteps>> {
    let spec = pilot.spec;
    let duration_s = CALIBRATION_S.min(spec.replay_s);
    let seed = spec.seed.wrapping_add(match when {
        SampleTime::BeforeReplay => CALIBRATION_SEED,
        SampleTime::AfterReplay => CALIBRATION_SEED + 1,
    });
    let sample = timed_requests(
        pilot.workload,
        &decide::replay_trace(pilot.workload, load, duration_s, seed),
    );
    if sample.is_empty() {
        return Ok(None);
    }
    let sample_spec = LoadSpec {
        seed,
        ..load_spec.clone()
    };
    let read = async |moment: &str| {
        engine
            .step_times()
            .await
            .inspect_err(|e| {
                tracing::warn!(error = %e, ?when, moment, "no step timings from the engine around a calibration sample");
            })
            .ok()
    };
    let Some(before) = read("before").await else {
        return Ok(None);
    };
    let (sent, mut readings) = tokio::join!(
        loadgen::replay(&sample_spec, &sample),
        block_readings(engine, duration_s)
    );
    sent?;
    let Some(after) = read("after").await else {
        return Ok(None);
    };
    readings.push(after);
    let blocks = std::iter::once(&before)
        .chain(&readings)
        .zip(&readings)
        .map(|(earlier, later)| later.since(earlier))
        .collect();
    Ok(Some(SampleSteps {
        when,
        duration_s,
        requests: sample.len(),
        blocks,
    }))
}

/// The calibration of the profile's step `model` by `samples`: their steps pooled against it, each
/// sample's own ratios beside, and the spread of their blocks' paces; `None` when the samples ran
/// too few steps to say.
fn calibration(samples: &[SampleSteps], model: &StepModel) -> Option<Calibration> {
    let totals: Vec<StepTimes> = samples.iter().map(SampleSteps::total).collect();
    let mut pooled = StepTimes::default();
    totals.iter().for_each(|t| pooled.add(t));
    let drift = step_fit::drift(&pooled, model);
    if drift.decode.is_none() && drift.prompt.is_none() {
        return None;
    }
    let blocks: Vec<&[StepTimes]> = samples.iter().map(|s| s.blocks.as_slice()).collect();
    let (block_decode_over_profiled, pace_spread) = step_fit::pace_spread(&blocks, model);
    Some(Calibration {
        duration_s: samples.iter().map(|s| s.duration_s).sum(),
        requests: samples.iter().map(|s| s.requests).sum(),
        samples: samples
            .iter()
            .zip(&totals)
            .map(|(s, total)| {
                let own = step_fit::drift(total, model);
                CalibrationSample {
                    when: s.when,
                    duration_s: s.duration_s,
                    requests: s.requests,
                    decode_over_profiled: own.decode,
                    prompt_over_profiled: own.prompt,
                }
            })
            .collect(),
        decode_over_profiled: drift.decode,
        prompt_over_profiled: drift.prompt,
        block_s: CALIBRATION_BLOCK_S,
        block_decode_over_profiled,
        pace_spread,
        step_model: step_fit::scaled(model, drift),
    })
}

/// The engine's step timings every [`CALIBRATION_BLOCK_S`] for `duration_s` (readings that fail are
/// left out, and so merge two blocks).
async fn block_readings(engine: &EngineProcess, duration_s: f64) -> Vec<StepTimes> {
    let start = tokio::time::Instant::now();
    let blocks = (duration_s / CALIBRATION_BLOCK_S).floor() as u32;
    let mut readings = Vec::with_capacity(blocks as usize + 1);
    for k in 1..=blocks {
        let due = Duration::from_secs_f64(f64::from(k) * CALIBRATION_BLOCK_S);
        tokio::time::sleep_until(start + due).await;
        if let Ok(reading) = engine.step_times().await {
            readings.push(reading);
        }
    }
    readings
}

/// Output tokens/s of the profiling shape on the running engine, measured as profiling measured it
/// (straight to the engine, closed loop at the batch size).
async fn measure_pace(base_url: &str, served: &str, shape: &NamedShape, seed: u64) -> Result<f64> {
    let mut spec = profile::load_spec(base_url, shape, Sla::default(), seed);
    spec.model = served.to_owned();
    let report = loadgen::run(&spec).await?;
    Ok(report.output_tokens_per_s)
}

#[allow(clippy::too_many_arguments)]
fn compare(
    pilot: &Pilot<'_>,
    plan: &Plan,
    load: ReplayLoad,
    trace: &[TraceRecord],
    records: &[ReplayRecord],
    prediction: &SpreadPrediction,
    host_pace: Option<HostPace>,
    settings: EngineSettings,
    host_hourly: f64,
) -> ReplayReport {
    let gpu = &plan.gpu_fallback;
    let is_gpu = |r: &ReplayRecord| {
        r.record
            .route
            .as_deref()
            .is_some_and(|route| route.contains("pool=gpu-baseline"))
    };
    let predicted = &prediction.point;
    let classes: Vec<ClassComparison> = pilot
        .workload
        .classes
        .iter()
        .zip(&predicted.classes)
        .enumerate()
        .map(|(index, (class, p))| {
            let mine: Vec<&ReplayRecord> =
                records.iter().filter(|r| r.class == class.name).collect();
            let ok: Vec<&ReplayRecord> = mine
                .iter()
                .copied()
                .filter(|r| r.record.error.is_none())
                .collect();
            let good = ok
                .iter()
                .filter(|r| class.sla.met_by(r.record.ttft_s, r.record.e2e_s))
                .count();
            ClassComparison {
                class: class.name.clone(),
                p99: Comparison::against(&mine, prediction, Some(index)),
                gpu_requests: mine.iter().filter(|r| is_gpu(r)).count(),
                observed_attainment: if mine.is_empty() {
                    0.0
                } else {
                    good as f64 / mine.len() as f64
                },
                predicted_attainment: p.attainment,
            }
        })
        .collect();
    let worst = classes
        .iter()
        .filter(|c| c.p99.requests >= 20)
        .filter_map(|c| c.p99.e2e_p99_error)
        .map(f64::abs)
        .reduce(f64::max);
    let everything: Vec<&ReplayRecord> = records.iter().collect();
    let all = Comparison::against(&everything, prediction, None);
    let cpu_cost = host_hourly * pilot.spec.replay_s / 3600.0;
    let observed_gpu: f64 = records
        .iter()
        .filter(|r| is_gpu(r))
        .map(|r| gpu.request_cost(r.record.prompt_tokens as f64, r.record.output_tokens as f64))
        .sum();
    let predicted_gpu: f64 = trace
        .iter()
        .map(|r| {
            let share = predicted.classes.get(r.class).map_or(0.0, |c| c.gpu_share);
            share * gpu.request_cost(f64::from(r.prompt_tokens), f64::from(r.output_tokens))
        })
        .sum();
    ReplayReport {
        load,
        duration_s: pilot.spec.replay_s,
        requests: records.len(),
        errors: records.iter().filter(|r| r.record.error.is_some()).count(),
        config: settings.to_string(),
        with_gpu: pilot.gpu_endpoint.is_some(),
        host_pace,
        all,
        classes,
        worst_e2e_p99_error: worst,
        observed_cost_usd: cpu_cost + observed_gpu,
        predicted_cost_usd: cpu_cost + predicted_gpu,
        step_model: None,
        all_with_replay_steps: None,
        calibration: None,
        pace_spread: None,
        all_as_profiled: None,
    }
}

/// The replay gateway's TOML: the workload's classes, one CPU pool (the engine, its service model from
/// the measured profile) and the GPU baseline when there is an endpoint.
fn gateway_config(
    workload: &Workload,
    gpu_endpoint: Option<(&GpuEndpoint, &GpuFallback)>,
    profile: &ConfigProfile,
    engine_url: &str,
    served: &str,
    host_hourly: f64,
) -> String {
    let service = ServiceCurve::from_profile(
        profile,
        Scaling {
            rule: ScalingRule::MeasuredOnType,
            factor: 1.0,
        },
    );
    let classes: Vec<Value> = workload
        .classes
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "priority": c.priority,
                "default_output_tokens": c.output_tokens.mean().round().max(1.0) as u32,
                "ttft_p99_ms": c.sla.ttft_p99_s.map(|s| s * 1000.0),
                "e2e_p99_ms": c.sla.e2e_p99_s.map(|s| s * 1000.0),
            })
        })
        .collect();
    let peak_tokens_per_s = profile
        .load_curve
        .iter()
        .map(|p| p.total_tokens_per_s)
        .fold(0.0, f64::max)
        .max(1.0);
    let mut pools = vec![json!({
        "name": "cpu-pilot",
        "kind": "cpu",
        "models": [served],
        "max_concurrency": 4096,
        "price_per_hour_usd": host_hourly.max(1e-9),
        "tokens_per_s": peak_tokens_per_s,
        "service": service,
        "first_byte_timeout_ms": 600_000,
        "idle_timeout_ms": 600_000,
        "endpoint": [{"url": engine_url, "name": "cpu-0"}],
    })];
    if let Some((gpu, fallback)) = gpu_endpoint {
        let per_million = match fallback.pricing {
            GpuPricing::PerToken {
                input_per_million,
                output_per_million,
            } => (input_per_million + output_per_million) / 2.0,
            GpuPricing::PerInstanceHour {
                hourly_cost,
                output_tokens_per_s,
            } => hourly_cost / (output_tokens_per_s.max(1e-9) * 3600.0) * 1e6,
        };
        let mut endpoint = json!({"url": gpu.url, "name": "gpu-0"});
        if let Some(env) = &gpu.api_key_env {
            endpoint["api_key_env"] = json!(env);
        }
        pools.push(json!({
            "name": "gpu-baseline",
            "kind": "gpu",
            "models": [served],
            "price_per_million_tokens_usd": per_million.max(1e-9),
            "ttft_p99_ms": fallback.ttft_p99_s * 1000.0,
            "tpot_p99_ms": fallback.tpot_p99_s * 1000.0,
            "first_byte_timeout_ms": 600_000,
            "endpoint": [endpoint],
        }));
    }
    let config = json!({
        "listen": "127.0.0.1:0",
        "default_class": workload.classes.first().map(|c| c.name.clone()).unwrap_or_default(),
        "health": {"interval_ms": 0},
        "retry": {"attempts": 1, "backoff_ms": 10},
        "class": classes,
        "pool": pools,
    });
    toml_text(&config)
}

/// `value` (a JSON object without nulls at the top level) as TOML; nulls inside tables are dropped.
fn toml_text(value: &Value) -> String {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    toml::to_string(&strip(value)).unwrap_or_default()
}

/// What reproduces the pilot: host, versions, settings and seed.
fn reproduce(pilot: &Pilot<'_>, threads: usize) -> Value {
    let hw = pilot.ctx.hardware;
    json!({
        "hardware": {
            "id": hw.id.0,
            "fingerprint": hw.fingerprint_hash,
            "cpu_model": hw.cpu_model,
            "cores": hw.cores,
            "threads": hw.threads,
            "numa_nodes": hw.numa_nodes,
            "bandwidth_gb_per_s": hw.bandwidth_gb_per_s,
        },
        "engine_version": pilot.ctx.engine_version,
        "model": {
            "name": pilot.ctx.model.name,
            "sha256": pilot.ctx.model.sha256,
        },
        "threads": threads,
        "seed": pilot.spec.seed,
        "pilot": pilot.spec,
        "baseline": pilot.workload.gpu_fallback,
        "gpu_endpoint": pilot.gpu_endpoint,
        "quality_text": quality::TEXT_ID,
    })
}

/// The headline figures of `plan` (stored as `plan_id`) the report keeps under `plan`.
pub fn plan_summary(plan: &Plan, plan_id: i64) -> PlanSummary {
    PlanSummary {
        id: plan_id,
        config: plan.chosen.config.clone(),
        weights: plan.chosen.weights.clone(),
        instance_type: plan.chosen.instance_type.clone(),
        region: plan.chosen.region.clone(),
        scaling: plan.chosen.scaling,
        cost_per_day_usd: plan.totals.cost_per_day,
        all_gpu_cost_per_day_usd: plan.totals.all_gpu_cost_per_day,
        savings_per_day_usd: plan.totals.savings_per_day,
        gpu_share: plan.totals.gpu_share,
        peak_cpu_instances: plan
            .hours
            .iter()
            .map(|h| h.cpu_instances)
            .max()
            .unwrap_or(0),
        degraded: plan.degraded.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_planner::workload::WorkloadFile;

    const WORKLOAD: &str = r#"
name = "t"
[[class]]
name = "chat"
share = 0.7
priority = 1
prompt_tokens = { dist = "fixed", tokens = 100 }
output_tokens = { dist = "fixed", tokens = 20 }
sla = { ttft_p99_s = 1.0, e2e_p99_s = 4.0 }
[[class]]
name = "extract"
share = 0.3
prompt_tokens = { dist = "fixed", tokens = 300 }
output_tokens = { dist = "fixed", tokens = 10 }
sla = { e2e_p99_s = 5.0 }
[arrivals]
hourly_rps = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
[gpu_fallback]
kind = "instance"
instance = "g2-standard-8"
output_tokens_per_s = 2000.0
ttft_p99_s = 0.25
tpot_p99_s = 0.012
basis = "assumed"
"#;

    /// Steps of one decode batch and one prompt length, each `pace` times what `model` says.
    fn steps_at(model: &StepModel, pace: f64, decode_steps: u32) -> StepTimes {
        let mut t = StepTimes::with_max_batch(2);
        for _ in 0..decode_steps {
            t.record(2, 0, pace * model.decode_s(2.0));
        }
        for tokens in [60, 120, 180] {
            let prompt = model.prompt_step_s + model.prompt_token_s * f64::from(tokens);
            t.record(1, tokens as usize, pace * (model.decode_s(1.0) + prompt));
        }
        t
    }

    /// Samples before and after the replay are pooled by their steps (a sample of more steps weighs
    /// more), each keeps its own ratios, and the blocks of both spread the pace.
    #[test]
    fn calibration_samples_are_pooled_around_the_replay() {
        let model = StepModel {
            decode_s_by_batch: vec![(1.0, 0.004), (2.0, 0.007)],
            prompt_token_s: 0.001,
            prompt_step_s: 0.010,
            steps: 100,
        };
        let sample = |when, pace: f64, decode_steps: u32| {
            let blocks = vec![
                steps_at(&model, pace * 0.98, decode_steps / 2),
                steps_at(&model, pace * 1.02, decode_steps / 2),
            ];
            SampleSteps {
                when,
                duration_s: 40.0,
                requests: 30,
                blocks,
            }
        };
        let samples = [
            sample(SampleTime::BeforeReplay, 1.10, 100),
            sample(SampleTime::AfterReplay, 1.00, 300),
        ];
        let c = calibration(&samples, &model).expect("a calibration");
        assert_eq!((c.duration_s, c.requests), (80.0, 60));
        let own: Vec<f64> = c
            .samples
            .iter()
            .filter_map(|s| s.decode_over_profiled)
            .collect();
        assert!(
            (own[0] - 1.10).abs() < 1e-9 && (own[1] - 1.0).abs() < 1e-9,
            "{own:?}"
        );
        let pooled = c.decode_over_profiled.expect("decode");
        assert!((pooled - 1.025).abs() < 1e-9, "{pooled}");
        let prompt = c.prompt_over_profiled.expect("prompt");
        assert!(prompt > 1.0 && prompt < 1.10, "{prompt}");
        assert_eq!(c.block_decode_over_profiled.len(), 4);
        assert!(c.pace_spread.expect("spread") > 0.02, "{c:?}");
        assert!((c.step_model.decode_s(2.0) - 1.025 * 0.007).abs() < 1e-12);
        assert!(calibration(&[], &model).is_none());
    }

    fn profile() -> ConfigProfile {
        let json = r#"[{
  "id": "p", "model": "m", "weights": "q8_0", "threads": 2, "max_batch": 8,
  "measured_on": { "host": "h", "vcpus": 2, "mem_bandwidth_gbs": 29.0, "int8_gops": 400.0 },
  "load_curve": [
    { "rate_rps": 0.5, "ttft_p99_s": 0.4, "tpot_p99_s": 0.010, "e2e_p99_s": 1.4,
      "output_tokens_per_s": 10.0, "total_tokens_per_s": 80.0 }],
  "mean_prompt_tokens": 160.0, "mean_output_tokens": 17.0 }]"#;
        ConfigProfile::list_from_json_str(json)
            .expect("profile")
            .remove(0)
    }

    #[test]
    fn the_replay_gateway_config_is_toml_with_every_class_and_pool() {
        let workload = WorkloadFile::from_toml_str(WORKLOAD)
            .and_then(|f| f.into_workload(None))
            .expect("workload");
        let gpu = GpuEndpoint {
            url: "http://127.0.0.1:9".into(),
            model: "m".into(),
            api_key_env: Some("GPU_KEY".into()),
        };
        let fallback = GpuFallback {
            name: "g2-standard-8".into(),
            pricing: GpuPricing::PerInstanceHour {
                hourly_cost: 0.72,
                output_tokens_per_s: 2000.0,
            },
            ttft_p99_s: 0.25,
            tpot_p99_s: 0.012,
        };
        let text = gateway_config(
            &workload,
            Some((&gpu, &fallback)),
            &profile(),
            "http://127.0.0.1:8",
            "m",
            0.5,
        );
        let table: toml::Table = toml::from_str(&text).expect("valid TOML");
        assert_eq!(table["default_class"].as_str(), Some("chat"));
        let classes = table["class"].as_array().expect("classes");
        assert_eq!(classes.len(), 2);
        assert_eq!(classes[0]["ttft_p99_ms"].as_float(), Some(1000.0));
        assert!(classes[1].get("ttft_p99_ms").is_none(), "{text}");
        let pools = table["pool"].as_array().expect("pools");
        assert_eq!(pools[0]["kind"].as_str(), Some("cpu"));
        assert_eq!(pools[0]["service"]["slots"].as_integer(), Some(8));
        assert_eq!(
            pools[0]["endpoint"][0]["url"].as_str(),
            Some("http://127.0.0.1:8")
        );
        assert_eq!(pools[1]["kind"].as_str(), Some("gpu"));
        assert_eq!(pools[1]["ttft_p99_ms"].as_float(), Some(250.0));
        let per_million = pools[1]["price_per_million_tokens_usd"]
            .as_float()
            .expect("price");
        assert!((per_million - 0.1).abs() < 1e-12, "{per_million}");
        assert_eq!(pools[0]["tokens_per_s"].as_float(), Some(80.0));
        assert_eq!(
            pools[1]["endpoint"][0]["api_key_env"].as_str(),
            Some("GPU_KEY")
        );
        let cpu_only = gateway_config(&workload, None, &profile(), "http://127.0.0.1:8", "m", 0.5);
        let table: toml::Table = toml::from_str(&cpu_only).expect("valid TOML");
        assert_eq!(table["pool"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn the_profiling_shape_is_the_mean_request_at_the_tightest_sla() {
        let workload = WorkloadFile::from_toml_str(WORKLOAD)
            .and_then(|f| f.into_workload(None))
            .expect("workload");
        assert_eq!(mix_mean(&workload, |c| c.prompt_tokens.mean()), 160.0);
        let spec = PilotSpec::default();
        let sla = capacity_sla(&workload);
        assert_eq!(sla.0, 1000.0);
        assert_eq!(sla.1, 200.0);
        // Every weight type at both default batch sizes.
        let configs: Vec<String> = candidates(&spec, 2).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            configs,
            [
                "q8_0 t2 b4 kv128 numa=none",
                "q8_0 t2 b8 kv128 numa=none",
                "q4_1 t2 b4 kv128 numa=none",
                "q4_1 t2 b8 kv128 numa=none"
            ]
        );
    }
}
