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

mod calibration;
mod gateway_file;
mod gateway_predictions;
mod host_load;
mod replay;
mod report;
mod stored;
mod text;

use std::{collections::BTreeMap, path::Path, time::Duration};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use strata_planner::{
    PlannerError,
    catalog::Catalog,
    pilot::{
        self as decide, PairedTasks, PilotSpec, QualityGate, ReplayEvidence, TaskCheck,
        VerdictInput, WeightQuality,
    },
    plan::{PlanInput, plan},
    profile::ConfigProfile,
    sim::{SimOptions, SimReport, simulate},
    workload::Workload,
};

pub use gateway_file::ReplayGateway;
pub use gateway_predictions::GatewayPredictions;
pub use report::{
    Calibration, CalibrationSample, ClassComparison, Comparison, ConfigResult, FailedReport,
    HostLoad, HostPace, PilotReport, PlanSummary, REPORT_SCHEMA_VERSION, ReplayInputs,
    ReplayPredictions, ReplayReport, ReplaySetup, ReportInputs, SampleTime, SimulationPair,
    plan_summary,
};
pub use stored::{StoredReport, StoredReportError, migrate_v1, read_stored};

use crate::{
    loadgen::{Arrival, Lengths, LoadError, Sla},
    planning::{self, PlanningError},
    profile::{
        self, CapacitySearch, EngineProcess, EngineSettings, NamedShape, Progress, RunContext,
        Sweep,
    },
    quality::{self, QualityError},
    store::{PilotId, PilotStatus, PilotUpdate, StoreError},
};

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
    let mut capacities = BTreeMap::new();
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
        let id = profile_id(pilot, settings);
        if let Some(capacity) = outcome.known_capacity_rps().filter(|c| *c > 0.0) {
            capacities.insert(id.clone(), capacity);
        }
        configs.push(ConfigResult {
            config: settings.to_string(),
            profile_id: id,
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
    let capacity = capacities.get(&plan.chosen.config).copied();
    let replay = replay::replay(pilot, &plan, &input.profiles, &paces, capacity, on_step).await?;
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
    Ok(PilotReport::new(ReportInputs {
        workload: pilot.workload.name.clone(),
        started_at,
        finished_at: Utc::now(),
        decision,
        reproduce,
        quality: gates,
        configs,
        plan: Some(plan_summary(&plan, plan_row.id.0)),
        simulation: SimulationPair { planned, double },
        replay: Some(replay),
    }))
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
    PilotReport::new(ReportInputs {
        workload: pilot.workload.name.clone(),
        started_at,
        finished_at: Utc::now(),
        decision,
        reproduce,
        quality: gates,
        configs,
        plan: None,
        simulation: SimulationPair {
            planned: empty.clone(),
            double: empty,
        },
        replay: None,
    })
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
                drain_hold: 0.0,
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

/// Bisections of the pilot's capacity search after it brackets the capacity.
const PROFILING_BISECTIONS: usize = 1;

/// The pilot's capacity search: probes of the mean request at the tightest class SLA, bisected
/// `bisections` times after bracketing.
fn capacity_search(pilot: &Pilot<'_>, bisections: usize) -> CapacitySearch {
    let (ttft_ms, tpot_ms) = capacity_sla(pilot.workload);
    CapacitySearch {
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
        bisections,
        confirmations: 1,
        min_probe_s: 10.0,
    }
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
        capacity: Some(capacity_search(pilot, PROFILING_BISECTIONS)),
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

/// The stored profiles of the configs profiled, on this host, their engines' steps ordered by the
/// pilot's drain hold (the order the CPU engines would serve in; the probes ran without one).
async fn pilot_profiles(pilot: &Pilot<'_>, configs: &[ConfigResult]) -> Result<Vec<ConfigProfile>> {
    let all = planning::profiles_from_store(pilot.ctx.store, Some(&pilot.ctx.model.name)).await?;
    Ok(all
        .into_iter()
        .filter(|p| configs.iter().any(|c| c.profile_id == p.id))
        .map(|mut p| {
            if let Some(steps) = &mut p.step_model {
                steps.drain_hold = pilot.spec.drain_hold;
            }
            p
        })
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
        drain_hold: 0.0,
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
