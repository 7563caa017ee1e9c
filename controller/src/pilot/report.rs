//! The pilot's report: one type, written to the store and printed with `--json`, read back by the
//! dashboard, and built in one go from what the pilot measured ([`PilotReport::new`], [`ReplayReport::new`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use strata_planner::{
    pace::{Band, PaceSpread, SpreadPrediction},
    pilot::{self as decide, QualityGate, ReplayLoad, Verdict},
    plan::{Degradation, Plan},
    profile::Scaling,
    service::StepModel,
    sim::SimReport,
    workload::{GpuFallback, TraceRecord, Workload},
};

use super::gateway_predictions::GatewayPredictions;
use crate::{
    loadgen::{Percentiles, ReplayRecord},
    profile::CurvePoint,
};

/// Version of the report's JSON layout; reports of older versions are read through
/// [`super::stored::read_stored`].
pub const REPORT_SCHEMA_VERSION: u32 = 2;

/// The report, as stored and printed with `--json`. Its layout is versioned by `schema_version`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// What a finished pilot found: the inputs of a [`PilotReport`].
#[derive(Debug, Clone)]
pub struct ReportInputs {
    /// The workload's name.
    pub workload: String,
    /// When the pilot started.
    pub started_at: DateTime<Utc>,
    /// When it finished.
    pub finished_at: DateTime<Utc>,
    /// The decision in full.
    pub decision: Verdict,
    /// What it ran on and with.
    pub reproduce: Value,
    /// Each weight type's quality gate.
    pub quality: Vec<QualityGate>,
    /// Each config profiled.
    pub configs: Vec<ConfigResult>,
    /// The plan's headline figures (`None` when no config was left to plan).
    pub plan: Option<PlanSummary>,
    /// The plan simulated at planned and at twice the traffic.
    pub simulation: SimulationPair,
    /// The replay against the prediction.
    pub replay: Option<ReplayReport>,
}

impl PilotReport {
    /// The report of `inputs`, at this version's layout; verdict, exit status, summary and savings
    /// come from the decision.
    pub fn new(inputs: ReportInputs) -> Self {
        let decision = inputs.decision;
        PilotReport {
            schema_version: REPORT_SCHEMA_VERSION,
            workload: inputs.workload,
            verdict: verdict_name(&decision),
            exit_code: decision.kind.exit_code(),
            summary: decision.summary.clone(),
            monthly_savings_usd: decision.monthly_savings_usd,
            started_at: inputs.started_at,
            finished_at: inputs.finished_at,
            reproduce: inputs.reproduce,
            quality: inputs.quality,
            configs: inputs.configs,
            plan: inputs.plan,
            simulation: inputs.simulation,
            replay: inputs.replay,
            decision,
        }
    }
}

fn verdict_name(v: &Verdict) -> String {
    serde_json::to_value(v.kind)
        .ok()
        .and_then(|k| k.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A failed pilot's report: what went wrong (the stored pilot says `failed`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimulationPair {
    /// At planned traffic.
    pub planned: SimReport,
    /// At twice the traffic, same pool.
    pub double: SimReport,
}

/// The replay and its prediction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The load sampled.
    pub load: ReplayLoad,
    /// The config's capacity searched again with the pilot's drain hold, which `load`'s share is of
    /// (`None`: no hold, or the load is the plan hour's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_capacity: Option<HeldCapacity>,
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
    /// How close the replay gateway's own per-request predictions came, before and after its online
    /// correction (none from reports made before the gateway kept them).
    #[serde(default)]
    pub gateway_predictions: Option<GatewayPredictions>,
    /// The CPU time the host's other processes used while the replay ran (`None`: not measured).
    #[serde(default)]
    pub host_load: Option<HostLoad>,
}

/// The replay config's capacity with the pilot's drain hold. Profiling probes every config without a
/// hold; a hold changes what the host can serve within the SLA (a held prompt waits, and its slot idles
/// while the decodes drain), so a share of the capacity is taken of this one when a hold is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldCapacity {
    /// The hold searched with (`strata serve --drain-hold`).
    pub drain_hold: f64,
    /// The highest rate found to meet the capacity SLA with the hold, requests/s.
    pub capacity_rps: f64,
    /// The same config's capacity as profiled, without a hold, requests/s.
    pub profiled_capacity_rps: f64,
    /// Every probe of the search, by rate.
    pub probes: Vec<CurvePoint>,
}

/// The CPU the pilot's host gave to the replay and to everything else while it ran: the host's busy
/// time (`/proc/stat`) less that of the pilot's own process and its engine and gateway, as mean
/// cores over the replay.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostLoad {
    /// Seconds measured over: the replay's.
    pub window_s: f64,
    /// Cores the host has.
    pub cores: u32,
    /// Mean cores the pilot, its engine and its gateway used.
    pub pilot_cores: f64,
    /// Mean cores every other process used.
    pub other_cores: f64,
    /// Cores others may use before the host counts as shared.
    pub shared_above_cores: f64,
    /// Whether the host was shared: others used more than `shared_above_cores`.
    pub shared: bool,
}

/// What a replay sent: the workload's requests at a plan hour's load, through one config.
#[derive(Debug, Clone)]
pub struct ReplaySetup<'a> {
    /// The workload replayed: its classes and their SLAs.
    pub workload: &'a Workload,
    /// The plan's GPU baseline, which prices the requests sent to GPU.
    pub gpu_fallback: &'a GpuFallback,
    /// The load sampled.
    pub load: ReplayLoad,
    /// The capacity searched with the pilot's drain hold, which `load`'s share is of (`None`: no hold,
    /// or the load is the plan's).
    pub held_capacity: Option<HeldCapacity>,
    /// The requests sampled, as the simulator predicts them.
    pub trace: &'a [TraceRecord],
    /// Seconds replayed.
    pub duration_s: f64,
    /// The config served.
    pub config: String,
    /// Whether a GPU endpoint took part.
    pub with_gpu: bool,
}

/// What a replay measured and what it is set against: the inputs of a [`ReplayReport`].
#[derive(Debug, Clone)]
pub struct ReplayInputs<'a> {
    /// What was sent.
    pub setup: ReplaySetup<'a>,
    /// The measured host's price per hour, $.
    pub host_hourly_usd: f64,
    /// The requests as the load generator recorded them.
    pub records: &'a [ReplayRecord],
    /// How fast the host ran the profiling shape around the replay.
    pub host_pace: Option<HostPace>,
    /// The engine's steps during the replay, fitted.
    pub step_model: Option<StepModel>,
    /// The calibration the prediction runs on.
    pub calibration: Option<Calibration>,
    /// The simulator's predictions of the same requests.
    pub predictions: ReplayPredictions,
    /// The replay gateway's own per-request predictions.
    pub gateway_predictions: Option<GatewayPredictions>,
    /// The CPU the host's other processes used while the replay ran.
    pub host_load: Option<HostLoad>,
}

impl<'a> ReplayInputs<'a> {
    /// A replay with nothing to send (the plan serves nothing on CPU and no GPU endpoint takes part),
    /// set against the simulator's `prediction`.
    pub fn nothing_sent(setup: ReplaySetup<'a>, prediction: SpreadPrediction) -> Self {
        ReplayInputs {
            setup,
            host_hourly_usd: 0.0,
            records: &[],
            host_pace: None,
            step_model: None,
            calibration: None,
            gateway_predictions: None,
            predictions: ReplayPredictions {
                calibrated: prediction,
                spread: None,
                on_replay_steps: None,
                as_profiled: None,
            },
            host_load: None,
        }
    }
}

/// The simulator's predictions a replay is compared with.
#[derive(Debug, Clone)]
pub struct ReplayPredictions {
    /// The prediction on the calibrated step model (else the profile's), over `spread`.
    pub calibrated: SpreadPrediction,
    /// The spread of paces `calibrated` is the median over (`None`: one simulation).
    pub spread: Option<PaceSpread>,
    /// On the replay's own step model instead (a diagnosis: it reads the replay).
    pub on_replay_steps: Option<SpreadPrediction>,
    /// On the profile's step model as profiled, over the same spread.
    pub as_profiled: Option<SpreadPrediction>,
}

impl ReplayReport {
    /// The replay's requests against their predictions: per class and together, with the cost of
    /// both and the diagnoses beside.
    pub fn new(inputs: ReplayInputs<'_>) -> Self {
        let records = inputs.records;
        let predictions = &inputs.predictions;
        let everything: Vec<&ReplayRecord> = records.iter().collect();
        let against_all = |p: &SpreadPrediction| Comparison::against(&everything, p, None);
        let setup = &inputs.setup;
        let classes = class_comparisons(setup.workload, records, &predictions.calibrated);
        let worst = classes
            .iter()
            .filter(|c| c.p99.requests >= 20)
            .filter_map(|c| c.p99.e2e_p99_error)
            .map(f64::abs)
            .reduce(f64::max);
        let cpu_cost = inputs.host_hourly_usd * setup.duration_s / 3600.0;
        let (observed_gpu, predicted_gpu) = gpu_costs(&inputs);
        let setup = inputs.setup;
        ReplayReport {
            load: setup.load,
            held_capacity: setup.held_capacity,
            duration_s: setup.duration_s,
            requests: records.len(),
            errors: records.iter().filter(|r| r.record.error.is_some()).count(),
            config: setup.config,
            with_gpu: setup.with_gpu,
            host_pace: inputs.host_pace,
            all: against_all(&predictions.calibrated),
            classes,
            worst_e2e_p99_error: worst,
            observed_cost_usd: cpu_cost + observed_gpu,
            predicted_cost_usd: cpu_cost + predicted_gpu,
            step_model: inputs.step_model,
            all_with_replay_steps: predictions.on_replay_steps.as_ref().map(against_all),
            calibration: inputs.calibration,
            pace_spread: predictions.spread,
            all_as_profiled: predictions.as_profiled.as_ref().map(against_all),
            gateway_predictions: inputs.gateway_predictions,
            host_load: inputs.host_load,
        }
    }
}

/// Whether the gateway sent a replayed request to the GPU baseline (its route header says so).
pub(super) fn went_to_gpu(r: &ReplayRecord) -> bool {
    r.record
        .route
        .as_deref()
        .is_some_and(|route| route.contains("pool=gpu-baseline"))
}

/// Each class's requests against the prediction: p99s, requests sent to GPU, SLA attainment.
fn class_comparisons(
    workload: &Workload,
    records: &[ReplayRecord],
    prediction: &SpreadPrediction,
) -> Vec<ClassComparison> {
    workload
        .classes
        .iter()
        .zip(&prediction.point.classes)
        .enumerate()
        .map(|(index, (class, p))| {
            let mine: Vec<&ReplayRecord> =
                records.iter().filter(|r| r.class == class.name).collect();
            let good = mine
                .iter()
                .filter(|r| r.record.error.is_none())
                .filter(|r| class.sla.met_by(r.record.ttft_s, r.record.e2e_s))
                .count();
            ClassComparison {
                class: class.name.clone(),
                p99: Comparison::against(&mine, prediction, Some(index)),
                gpu_requests: mine.iter().filter(|r| went_to_gpu(r)).count(),
                observed_attainment: if mine.is_empty() {
                    0.0
                } else {
                    good as f64 / mine.len() as f64
                },
                predicted_attainment: p.attainment,
            }
        })
        .collect()
}

/// The GPU requests' cost at the baseline's price: as the gateway routed them, and as the
/// simulation's routing shares would, $.
fn gpu_costs(inputs: &ReplayInputs<'_>) -> (f64, f64) {
    let gpu = inputs.setup.gpu_fallback;
    let observed = inputs
        .records
        .iter()
        .filter(|r| went_to_gpu(r))
        .map(|r| gpu.request_cost(r.record.prompt_tokens as f64, r.record.output_tokens as f64))
        .sum();
    let predicted = &inputs.predictions.calibrated.point;
    let predicted = inputs
        .setup
        .trace
        .iter()
        .map(|r| {
            let share = predicted.classes.get(r.class).map_or(0.0, |c| c.gpu_share);
            share * gpu.request_cost(f64::from(r.prompt_tokens), f64::from(r.output_tokens))
        })
        .sum();
    (observed, predicted)
}

/// Two more samples of the replay's load (other seeds), sent through the replay's gateway right before
/// the replay and right after it. The engine then shares the pilot host's cores with the gateway and
/// the load generator, which capacity probes straight to the engine do not see, and it runs its steps
/// a few percent slower. A shared host's pace also drifts within minutes, so the samples bracket the
/// replay as calibration standards bracket a measurement: pooled, they stand for the pace of the
/// minutes between them, and neither reads the replay. The replay's prediction runs the simulator on
/// the profile's step model scaled by the samples' pooled ratios (their decode and prompt steps against
/// the profile's), with the pace spread as widely as the samples' blocks moved (see
/// [`strata_planner::pace`]). The time spent outside the engine's timed steps goes into it too: the
/// mean gap between steps while requests ran, added to every step, and the time each request spent
/// outside the engine (the samples' mean TTFT as their clients saw it, less the mean the engine itself
/// timed of the same requests, at least 0), added to every request's latencies. On a busy host both
/// grow, and the prediction with them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Gaps between the engine's steps while requests ran, in the samples together.
    #[serde(default)]
    pub step_gaps: u64,
    /// Their mean, seconds: added to every step of the prediction.
    #[serde(default)]
    pub step_gap_s: f64,
    /// Seconds each request spent outside the engine: added to every request's TTFT and E2E in the
    /// prediction.
    #[serde(default)]
    pub request_overhead_s: f64,
    /// The step model the replay is predicted with: the profile's, scaled by the two ratios, with
    /// the gap between steps and the time outside the engine.
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
    /// When its samples ran against the replay, in words.
    pub fn timing(&self) -> &'static str {
        let ran = |t| self.samples.iter().any(|s| s.when == t);
        match (ran(SampleTime::BeforeReplay), ran(SampleTime::AfterReplay)) {
            (true, true) => "half right before the replay and half right after it",
            (false, true) => "right after the replay",
            (true, false) => "right before the replay",
            (false, false) => "at times the report does not list",
        }
    }
}

/// One calibration sample: when it ran, and how the engine's steps ran in it against the profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Mean seconds between the engine's steps while requests ran (`None`: no gaps).
    #[serde(default)]
    pub step_gap_s: Option<f64>,
    /// Median TTFT its clients saw of the requests the engine served, seconds.
    #[serde(default)]
    pub observed_ttft_p50_s: Option<f64>,
    /// The simulator's median TTFT of the same requests on the calibrated steps and gaps, seconds.
    #[serde(default)]
    pub predicted_ttft_p50_s: Option<f64>,
    /// Mean TTFT its clients saw of the requests the engine served, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ttft_mean_s: Option<f64>,
    /// Mean TTFT the engine itself timed of the same requests (from their arrival at its HTTP
    /// handler), seconds; `None` when its metrics could not be read, or counted other requests than
    /// the clients saw served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_ttft_mean_s: Option<f64>,
}

/// The host's speed on the profiling shape (closed loop at the batch size, straight to the engine):
/// when the config was profiled, right before the replay and right after it. The prediction comes from
/// the profile as measured; on a shared host whose speed drifts between profiling and replay, these
/// figures tell a reviewer how much of an error is the host's rather than the simulator's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

    /// A calibration recorded before the time outside the engine's steps was measured reads with
    /// none, and one that measured it reads back as written.
    #[test]
    fn a_calibration_without_time_outside_the_steps_reads_with_none() {
        let older = serde_json::json!({
            "duration_s": 80.0, "requests": 60, "block_s": 10.0,
            "samples": [{"when": "before_replay", "duration_s": 40.0, "requests": 30,
                         "decode_over_profiled": 1.0, "prompt_over_profiled": null}],
            "decode_over_profiled": 1.0, "prompt_over_profiled": null,
            "block_decode_over_profiled": [], "pace_spread": null,
            "step_model": {"decode_s_by_batch": [[1.0, 0.01]], "prompt_token_s": 0.001,
                           "prompt_step_s": 0.0, "steps": 10}
        });
        let c: Calibration = serde_json::from_value(older).expect("an older calibration reads");
        assert_eq!(
            (c.step_gaps, c.step_gap_s, c.request_overhead_s),
            (0, 0.0, 0.0)
        );
        assert_eq!(c.samples[0].step_gap_s, None);
        assert_eq!(c.samples[0].observed_ttft_p50_s, None);
        assert_eq!(c.step_model.step_gap_s, 0.0);
        let measured = Calibration {
            step_gaps: 120,
            step_gap_s: 0.003,
            request_overhead_s: 0.04,
            step_model: c.step_model.with_time_outside_steps(0.003, 0.04),
            ..c
        };
        let json = serde_json::to_value(&measured).expect("serializes");
        assert_eq!(json["step_model"]["request_overhead_s"], 0.04);
        let back: Calibration = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, measured);
    }
}
