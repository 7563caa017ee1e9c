//! The store's typed rows: a `New*` struct for each insert, a `*Row` struct for what comes back, typed ids,
//! and the small enums kept in text columns.
//!
//! Units are in the field names (`_ms`, `_bytes`, `_usd`, `_per_s`). Timestamps are UTC and kept to the
//! microsecond on both backends; integers are `i64` because that is what both databases store.

use std::{fmt, str::FromStr};

use chrono::{DateTime, NaiveDate, NaiveTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::FromRow;

macro_rules! id_type {
    ($(#[$doc:meta] $name:ident;)*) => {$(
        #[$doc]
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, sqlx::Type,
        )]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(pub i64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    )*};
}

id_type! {
    /// The id of a [`HardwareRow`].
    HardwareId;
    /// The id of a [`ModelRow`].
    ModelId;
    /// The id of a [`ConfigRow`].
    ConfigId;
    /// The id of a [`ProfileRunRow`].
    ProfileRunId;
    /// The id of a [`CapacityResultRow`].
    CapacityResultId;
    /// The id of a [`QualityResultRow`].
    QualityResultId;
    /// The id of a [`CatalogPriceRow`].
    CatalogPriceId;
    /// The id of a [`WorkloadRow`].
    WorkloadId;
    /// The id of a [`PlanRow`].
    PlanId;
    /// The id of a [`PilotRow`].
    PilotId;
    /// The id of a [`GatewayDecisionRow`].
    GatewayDecisionId;
    /// The id of a [`LedgerEntryRow`].
    LedgerEntryId;
    /// The id of a [`ProfileJobRow`].
    ProfileJobId;
    /// The id of an [`EndpointRow`].
    EndpointId;
    /// The id of an [`EndpointRunRow`].
    EndpointRunId;
}

/// A half-open span of time, `start <= t < end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWindow {
    /// The first instant inside.
    pub start: DateTime<Utc>,
    /// The first instant after.
    pub end: DateTime<Utc>,
}

impl TimeWindow {
    /// The UTC calendar day `date`.
    pub fn day(date: NaiveDate) -> Self {
        let start = date.and_time(NaiveTime::MIN).and_utc();
        Self {
            start,
            end: start + chrono::Days::new(1),
        }
    }
}

/// A CPU host to record, as measured by fingerprinting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewHardware {
    /// A hash of the fields below that identifies the host kind; unique.
    pub fingerprint_hash: String,
    /// The CPU model name, as the OS reports it.
    pub cpu_model: String,
    /// Physical cores.
    pub cores: i64,
    /// Hardware threads.
    pub threads: i64,
    /// Instruction set extensions the kernels care about (`avx2`, `avx512_vnni`, `neon_dot`, ...).
    pub isa_flags: Vec<String>,
    /// L1 data cache per core, in bytes.
    pub l1d_cache_bytes: Option<i64>,
    /// L2 cache per core, in bytes.
    pub l2_cache_bytes: Option<i64>,
    /// L3 cache in total, in bytes.
    pub l3_cache_bytes: Option<i64>,
    /// NUMA nodes.
    pub numa_nodes: i64,
    /// Installed memory, in bytes.
    pub memory_bytes: i64,
    /// Measured memory bandwidth, in GB/s.
    pub bandwidth_gb_per_s: Option<f64>,
    /// Measured peak int8 throughput, in billions of operations per second.
    pub peak_int8_gops: Option<f64>,
    /// Measured peak f32 throughput, in billions of operations per second.
    pub peak_f32_gops: Option<f64>,
}

/// A recorded CPU host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct HardwareRow {
    /// Its id.
    pub id: HardwareId,
    /// See [`NewHardware::fingerprint_hash`].
    pub fingerprint_hash: String,
    /// See [`NewHardware::cpu_model`].
    pub cpu_model: String,
    /// See [`NewHardware::cores`].
    pub cores: i64,
    /// See [`NewHardware::threads`].
    pub threads: i64,
    /// See [`NewHardware::isa_flags`].
    #[sqlx(json)]
    pub isa_flags: Vec<String>,
    /// See [`NewHardware::l1d_cache_bytes`].
    pub l1d_cache_bytes: Option<i64>,
    /// See [`NewHardware::l2_cache_bytes`].
    pub l2_cache_bytes: Option<i64>,
    /// See [`NewHardware::l3_cache_bytes`].
    pub l3_cache_bytes: Option<i64>,
    /// See [`NewHardware::numa_nodes`].
    pub numa_nodes: i64,
    /// See [`NewHardware::memory_bytes`].
    pub memory_bytes: i64,
    /// See [`NewHardware::bandwidth_gb_per_s`].
    pub bandwidth_gb_per_s: Option<f64>,
    /// See [`NewHardware::peak_int8_gops`].
    pub peak_int8_gops: Option<f64>,
    /// See [`NewHardware::peak_f32_gops`].
    pub peak_f32_gops: Option<f64>,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
}

/// A model file to record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewModel {
    /// Its name; unique.
    pub name: String,
    /// Where the file (or checkpoint folder) is.
    pub path: String,
    /// Its format, e.g. `gguf` or `safetensors`.
    pub format: String,
    /// The SHA-256 of its content, lowercase hex; unique.
    pub sha256: String,
    /// Its size, in bytes.
    pub size_bytes: i64,
    /// Its parameter count, when known.
    pub parameters: Option<i64>,
    /// Whether its weights are random (`strata model synth`): speed measured on it is real, quality
    /// is not.
    pub synthetic: bool,
}

/// A recorded model file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct ModelRow {
    /// Its id.
    pub id: ModelId,
    /// See [`NewModel::name`].
    pub name: String,
    /// See [`NewModel::path`].
    pub path: String,
    /// See [`NewModel::format`].
    pub format: String,
    /// See [`NewModel::sha256`].
    pub sha256: String,
    /// See [`NewModel::size_bytes`].
    pub size_bytes: i64,
    /// See [`NewModel::parameters`].
    pub parameters: Option<i64>,
    /// See [`NewModel::synthetic`].
    pub synthetic: bool,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
}

/// A config to record: a model and the settings it runs with. The combination is unique.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NewConfig {
    /// The model.
    pub model_id: ModelId,
    /// The runtime weight type, by its engine name (`f32`, `q8_0`, `q4_1`, ...).
    pub weight_type: String,
    /// Engine threads.
    pub threads: i64,
    /// Most requests decoded together.
    pub max_batch: i64,
    /// The NUMA placement policy, by name.
    pub numa_policy: String,
    /// KV cache budget, in MiB.
    pub kv_memory_mib: i64,
}

/// A recorded config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, FromRow)]
pub struct ConfigRow {
    /// Its id.
    pub id: ConfigId,
    /// See [`NewConfig::model_id`].
    pub model_id: ModelId,
    /// See [`NewConfig::weight_type`].
    pub weight_type: String,
    /// See [`NewConfig::threads`].
    pub threads: i64,
    /// See [`NewConfig::max_batch`].
    pub max_batch: i64,
    /// See [`NewConfig::numa_policy`].
    pub numa_policy: String,
    /// See [`NewConfig::kv_memory_mib`].
    pub kv_memory_mib: i64,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
}

/// One profiling run's results, to record. Latencies are percentiles, in milliseconds, with the
/// definitions of the design's metrics section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewProfileRun {
    /// The config that ran.
    pub config_id: ConfigId,
    /// The host it ran on.
    pub hardware_id: HardwareId,
    /// When the load started.
    pub started_at: DateTime<Utc>,
    /// When the last request finished.
    pub finished_at: DateTime<Utc>,
    /// The shape of the offered load (arrival process, prompt and output lengths), as JSON.
    pub workload_shape: Value,
    /// Requests sent.
    pub request_count: i64,
    /// Requests that failed.
    pub error_count: i64,
    /// Time to first token, p50.
    pub ttft_p50_ms: f64,
    /// Time to first token, p90.
    pub ttft_p90_ms: f64,
    /// Time to first token, p95.
    pub ttft_p95_ms: f64,
    /// Time to first token, p99.
    pub ttft_p99_ms: f64,
    /// Mean time per output token, p50 over requests.
    pub tpot_p50_ms: f64,
    /// Mean time per output token, p90 over requests.
    pub tpot_p90_ms: f64,
    /// Mean time per output token, p95 over requests.
    pub tpot_p95_ms: f64,
    /// Mean time per output token, p99 over requests.
    pub tpot_p99_ms: f64,
    /// Inter-token latency, p50 over all gaps.
    pub itl_p50_ms: f64,
    /// Inter-token latency, p90 over all gaps.
    pub itl_p90_ms: f64,
    /// Inter-token latency, p95 over all gaps.
    pub itl_p95_ms: f64,
    /// Inter-token latency, p99 over all gaps.
    pub itl_p99_ms: f64,
    /// Arrival to last token, p50.
    pub e2e_p50_ms: f64,
    /// Arrival to last token, p90.
    pub e2e_p90_ms: f64,
    /// Arrival to last token, p95.
    pub e2e_p95_ms: f64,
    /// Arrival to last token, p99.
    pub e2e_p99_ms: f64,
    /// Output tokens per second.
    pub output_tokens_per_s: f64,
    /// Prompt and output tokens per second.
    pub total_tokens_per_s: f64,
    /// Completed requests per second.
    pub requests_per_s: f64,
    /// Requests per second that met the SLA.
    pub goodput_requests_per_s: f64,
    /// The fraction of requests that met the SLA, 0 to 1.
    pub sla_attainment: f64,
    /// Peak resident memory of the engine, in bytes.
    pub peak_rss_bytes: i64,
    /// Mean CPU utilization of the engine's cores, 0 to 1.
    pub cpu_utilization: f64,
    /// The kernel tier the engine picked (`scalar`, `avx2`, `avx512_vnni`, ...).
    pub kernel_tier: String,
    /// The thread placement the run used, as recorded by the engine.
    pub placement: String,
    /// The engine's version.
    pub engine_version: String,
}

/// A recorded profiling run. See [`NewProfileRun`] for the fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct ProfileRunRow {
    /// Its id.
    pub id: ProfileRunId,
    /// See [`NewProfileRun::config_id`].
    pub config_id: ConfigId,
    /// See [`NewProfileRun::hardware_id`].
    pub hardware_id: HardwareId,
    /// See [`NewProfileRun::started_at`].
    pub started_at: DateTime<Utc>,
    /// See [`NewProfileRun::finished_at`].
    pub finished_at: DateTime<Utc>,
    /// See [`NewProfileRun::workload_shape`].
    #[sqlx(json)]
    pub workload_shape: Value,
    /// See [`NewProfileRun::request_count`].
    pub request_count: i64,
    /// See [`NewProfileRun::error_count`].
    pub error_count: i64,
    /// See [`NewProfileRun::ttft_p50_ms`].
    pub ttft_p50_ms: f64,
    /// See [`NewProfileRun::ttft_p90_ms`].
    pub ttft_p90_ms: f64,
    /// See [`NewProfileRun::ttft_p95_ms`].
    pub ttft_p95_ms: f64,
    /// See [`NewProfileRun::ttft_p99_ms`].
    pub ttft_p99_ms: f64,
    /// See [`NewProfileRun::tpot_p50_ms`].
    pub tpot_p50_ms: f64,
    /// See [`NewProfileRun::tpot_p90_ms`].
    pub tpot_p90_ms: f64,
    /// See [`NewProfileRun::tpot_p95_ms`].
    pub tpot_p95_ms: f64,
    /// See [`NewProfileRun::tpot_p99_ms`].
    pub tpot_p99_ms: f64,
    /// See [`NewProfileRun::itl_p50_ms`].
    pub itl_p50_ms: f64,
    /// See [`NewProfileRun::itl_p90_ms`].
    pub itl_p90_ms: f64,
    /// See [`NewProfileRun::itl_p95_ms`].
    pub itl_p95_ms: f64,
    /// See [`NewProfileRun::itl_p99_ms`].
    pub itl_p99_ms: f64,
    /// See [`NewProfileRun::e2e_p50_ms`].
    pub e2e_p50_ms: f64,
    /// See [`NewProfileRun::e2e_p90_ms`].
    pub e2e_p90_ms: f64,
    /// See [`NewProfileRun::e2e_p95_ms`].
    pub e2e_p95_ms: f64,
    /// See [`NewProfileRun::e2e_p99_ms`].
    pub e2e_p99_ms: f64,
    /// See [`NewProfileRun::output_tokens_per_s`].
    pub output_tokens_per_s: f64,
    /// See [`NewProfileRun::total_tokens_per_s`].
    pub total_tokens_per_s: f64,
    /// See [`NewProfileRun::requests_per_s`].
    pub requests_per_s: f64,
    /// See [`NewProfileRun::goodput_requests_per_s`].
    pub goodput_requests_per_s: f64,
    /// See [`NewProfileRun::sla_attainment`].
    pub sla_attainment: f64,
    /// See [`NewProfileRun::peak_rss_bytes`].
    pub peak_rss_bytes: i64,
    /// See [`NewProfileRun::cpu_utilization`].
    pub cpu_utilization: f64,
    /// See [`NewProfileRun::kernel_tier`].
    pub kernel_tier: String,
    /// See [`NewProfileRun::placement`].
    pub placement: String,
    /// See [`NewProfileRun::engine_version`].
    pub engine_version: String,
}

/// The highest load a config sustains on a host within SLA targets, to record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewCapacityResult {
    /// The config.
    pub config_id: ConfigId,
    /// The host.
    pub hardware_id: HardwareId,
    /// The run the result was read from, if one.
    pub run_id: Option<ProfileRunId>,
    /// The TTFT p99 target, in milliseconds.
    pub sla_ttft_p99_ms: f64,
    /// The TPOT p99 target, in milliseconds.
    pub sla_tpot_p99_ms: f64,
    /// The highest arrival rate that meets both targets, in requests per second.
    pub max_requests_per_s: f64,
    /// Latency against offered load, as JSON points.
    pub load_curve: Value,
    /// The engine's step model fitted from its timings during the search, as JSON, when it had one.
    pub step_model: Option<Value>,
}

/// A recorded capacity result. See [`NewCapacityResult`] for the fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct CapacityResultRow {
    /// Its id.
    pub id: CapacityResultId,
    /// See [`NewCapacityResult::config_id`].
    pub config_id: ConfigId,
    /// See [`NewCapacityResult::hardware_id`].
    pub hardware_id: HardwareId,
    /// See [`NewCapacityResult::run_id`].
    pub run_id: Option<ProfileRunId>,
    /// See [`NewCapacityResult::sla_ttft_p99_ms`].
    pub sla_ttft_p99_ms: f64,
    /// See [`NewCapacityResult::sla_tpot_p99_ms`].
    pub sla_tpot_p99_ms: f64,
    /// See [`NewCapacityResult::max_requests_per_s`].
    pub max_requests_per_s: f64,
    /// See [`NewCapacityResult::load_curve`].
    #[sqlx(json)]
    pub load_curve: Value,
    /// See [`NewCapacityResult::step_model`].
    #[sqlx(json(nullable))]
    pub step_model: Option<Value>,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
}

/// Output quality of a config on a fixed text, to record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewQualityResult {
    /// The config.
    pub config_id: ConfigId,
    /// Which fixed text was scored.
    pub text_id: String,
    /// Perplexity on the text.
    pub perplexity: f64,
    /// Fraction of positions whose top-1 token matches the highest-precision run of the same model, 0 to 1;
    /// `None` for that reference run itself.
    pub top1_agreement: Option<f64>,
}

/// A recorded quality result. See [`NewQualityResult`] for the fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct QualityResultRow {
    /// Its id.
    pub id: QualityResultId,
    /// See [`NewQualityResult::config_id`].
    pub config_id: ConfigId,
    /// See [`NewQualityResult::text_id`].
    pub text_id: String,
    /// See [`NewQualityResult::perplexity`].
    pub perplexity: f64,
    /// See [`NewQualityResult::top1_agreement`].
    pub top1_agreement: Option<f64>,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
}

/// A price list entry, to record. Unique per provider, region, instance type and date.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewCatalogPrice {
    /// The cloud or hosting provider.
    pub provider: String,
    /// The region.
    pub region: String,
    /// The instance type.
    pub instance_type: String,
    /// Virtual CPUs.
    pub vcpus: i64,
    /// Memory, in GiB.
    pub memory_gib: f64,
    /// The accelerator model, if any.
    pub accelerator: Option<String>,
    /// How many accelerators.
    pub accelerator_count: i64,
    /// On-demand price, in USD per hour.
    pub on_demand_usd_per_hour: f64,
    /// Spot price, in USD per hour.
    pub spot_usd_per_hour: Option<f64>,
    /// Committed-use price, in USD per hour.
    pub committed_usd_per_hour: Option<f64>,
    /// Power draw under load, in watts, for on-premises costing.
    pub watts: Option<f64>,
    /// Where the price came from.
    pub source: String,
    /// The day the price was read.
    pub price_date: NaiveDate,
}

/// A recorded price. See [`NewCatalogPrice`] for the fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct CatalogPriceRow {
    /// Its id.
    pub id: CatalogPriceId,
    /// See [`NewCatalogPrice::provider`].
    pub provider: String,
    /// See [`NewCatalogPrice::region`].
    pub region: String,
    /// See [`NewCatalogPrice::instance_type`].
    pub instance_type: String,
    /// See [`NewCatalogPrice::vcpus`].
    pub vcpus: i64,
    /// See [`NewCatalogPrice::memory_gib`].
    pub memory_gib: f64,
    /// See [`NewCatalogPrice::accelerator`].
    pub accelerator: Option<String>,
    /// See [`NewCatalogPrice::accelerator_count`].
    pub accelerator_count: i64,
    /// See [`NewCatalogPrice::on_demand_usd_per_hour`].
    pub on_demand_usd_per_hour: f64,
    /// See [`NewCatalogPrice::spot_usd_per_hour`].
    pub spot_usd_per_hour: Option<f64>,
    /// See [`NewCatalogPrice::committed_usd_per_hour`].
    pub committed_usd_per_hour: Option<f64>,
    /// See [`NewCatalogPrice::watts`].
    pub watts: Option<f64>,
    /// See [`NewCatalogPrice::source`].
    pub source: String,
    /// See [`NewCatalogPrice::price_date`].
    pub price_date: NaiveDate,
}

/// A workload, to record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewWorkload {
    /// Its name; unique.
    pub name: String,
    /// Its description (traffic by hour, request shapes, SLA classes), as JSON.
    pub spec: Value,
}

/// A recorded workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct WorkloadRow {
    /// Its id.
    pub id: WorkloadId,
    /// See [`NewWorkload::name`].
    pub name: String,
    /// See [`NewWorkload::spec`].
    #[sqlx(json)]
    pub spec: Value,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
}

/// A capacity plan, to record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewPlan {
    /// The workload it plans for.
    pub workload_id: WorkloadId,
    /// The plan, as JSON.
    pub plan: Value,
    /// Its cost over its horizon, in USD.
    pub total_cost_usd: f64,
    /// The output tokens it serves over its horizon.
    pub total_output_tokens: i64,
}

/// A recorded plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct PlanRow {
    /// Its id.
    pub id: PlanId,
    /// See [`NewPlan::workload_id`].
    pub workload_id: WorkloadId,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
    /// See [`NewPlan::plan`].
    #[sqlx(json)]
    pub plan: Value,
    /// See [`NewPlan::total_cost_usd`].
    pub total_cost_usd: f64,
    /// See [`NewPlan::total_output_tokens`].
    pub total_output_tokens: i64,
}

/// Where a pilot evaluation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PilotStatus {
    /// Recorded, not started.
    Pending,
    /// Being evaluated.
    Running,
    /// Finished with a verdict.
    Done,
    /// Stopped by an error.
    Failed,
}

/// A pilot's new state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PilotUpdate {
    /// Its status.
    pub status: PilotStatus,
    /// Its verdict, once there is one.
    pub verdict: Option<String>,
    /// Its report (savings, risk, per-config results), as JSON.
    pub report: Option<Value>,
}

/// A recorded pilot evaluation. New pilots start [`PilotStatus::Pending`] with no verdict or report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct PilotRow {
    /// Its id.
    pub id: PilotId,
    /// The workload evaluated.
    pub workload_id: WorkloadId,
    /// See [`PilotUpdate::status`].
    #[sqlx(try_from = "String")]
    pub status: PilotStatus,
    /// See [`PilotUpdate::verdict`].
    pub verdict: Option<String>,
    /// See [`PilotUpdate::report`].
    #[sqlx(json(nullable))]
    pub report: Option<Value>,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

/// The source of a gateway's own (live) traffic.
pub const LIVE_TRAFFIC: &str = "live";

/// The source of the traffic a pilot of `workload` replays through its gateway.
pub fn pilot_replay_source(workload: &str) -> String {
    format!("pilot:{workload}")
}

/// One gateway routing decision, to record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewGatewayDecision {
    /// When it was decided.
    pub decided_at: DateTime<Utc>,
    /// The request's id.
    pub request_id: String,
    /// The request's SLA class.
    pub sla_class: String,
    /// The pool chosen: a CPU pool or a GPU fallback.
    pub pool: String,
    /// The upstream endpoint chosen.
    pub endpoint: String,
    /// Why (the policy's reason code).
    pub reason: String,
    /// The latency the policy predicted, in milliseconds.
    pub predicted_latency_ms: Option<f64>,
    /// The latency observed, in milliseconds, once known.
    pub observed_latency_ms: Option<f64>,
    /// Prompt tokens.
    pub prompt_tokens: i64,
    /// Output tokens.
    pub output_tokens: i64,
    /// What the request cost, in USD.
    pub cost_usd: f64,
    /// Where the traffic came from: [`LIVE_TRAFFIC`] for a gateway's own requests, `pilot:WORKLOAD`
    /// for a pilot's replay.
    pub source: String,
}

/// A recorded gateway decision. See [`NewGatewayDecision`] for the fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct GatewayDecisionRow {
    /// Its id.
    pub id: GatewayDecisionId,
    /// See [`NewGatewayDecision::decided_at`].
    pub decided_at: DateTime<Utc>,
    /// See [`NewGatewayDecision::request_id`].
    pub request_id: String,
    /// See [`NewGatewayDecision::sla_class`].
    pub sla_class: String,
    /// See [`NewGatewayDecision::pool`].
    pub pool: String,
    /// See [`NewGatewayDecision::endpoint`].
    pub endpoint: String,
    /// See [`NewGatewayDecision::reason`].
    pub reason: String,
    /// See [`NewGatewayDecision::predicted_latency_ms`].
    pub predicted_latency_ms: Option<f64>,
    /// See [`NewGatewayDecision::observed_latency_ms`].
    pub observed_latency_ms: Option<f64>,
    /// See [`NewGatewayDecision::prompt_tokens`].
    pub prompt_tokens: i64,
    /// See [`NewGatewayDecision::output_tokens`].
    pub output_tokens: i64,
    /// See [`NewGatewayDecision::cost_usd`].
    pub cost_usd: f64,
    /// See [`NewGatewayDecision::source`].
    pub source: String,
}

/// Money spent by a pool, to record in the budget ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewLedgerEntry {
    /// When it was spent.
    pub recorded_at: DateTime<Utc>,
    /// The pool that spent it.
    pub pool: String,
    /// How much, in USD.
    pub amount_usd: f64,
    /// The tokens it bought.
    pub tokens: i64,
    /// A free-form note.
    pub note: Option<String>,
}

/// A recorded ledger entry. See [`NewLedgerEntry`] for the fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct LedgerEntryRow {
    /// Its id.
    pub id: LedgerEntryId,
    /// See [`NewLedgerEntry::recorded_at`].
    pub recorded_at: DateTime<Utc>,
    /// See [`NewLedgerEntry::pool`].
    pub pool: String,
    /// See [`NewLedgerEntry::amount_usd`].
    pub amount_usd: f64,
    /// See [`NewLedgerEntry::tokens`].
    pub tokens: i64,
    /// See [`NewLedgerEntry::note`].
    pub note: Option<String>,
}

/// The sum of ledger entries.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, FromRow)]
pub struct LedgerTotal {
    /// Money spent, in USD.
    pub amount_usd: f64,
    /// Tokens bought.
    pub tokens: i64,
}

/// The latest measured run of one config on one host, joined with its model, config, host, latest
/// capacity result and latest quality result: one row of the dashboard's config table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct ConfigSummaryRow {
    /// The latest run of this config on this host.
    pub run_id: ProfileRunId,
    /// How many runs this config has on this host.
    pub run_count: i64,
    /// The config.
    pub config_id: ConfigId,
    /// The host.
    pub hardware_id: HardwareId,
    /// The model.
    pub model_id: ModelId,
    /// The model's name.
    pub model_name: String,
    /// Whether the model's weights are random (see [`NewModel::synthetic`]).
    pub model_synthetic: bool,
    /// See [`NewConfig::weight_type`].
    pub weight_type: String,
    /// See [`NewConfig::threads`].
    pub threads: i64,
    /// See [`NewConfig::max_batch`].
    pub max_batch: i64,
    /// See [`NewConfig::numa_policy`].
    pub numa_policy: String,
    /// See [`NewConfig::kv_memory_mib`].
    pub kv_memory_mib: i64,
    /// See [`NewHardware::cpu_model`].
    pub cpu_model: String,
    /// See [`NewHardware::cores`].
    pub cores: i64,
    /// See [`NewHardware::numa_nodes`].
    pub numa_nodes: i64,
    /// See [`NewProfileRun::started_at`].
    pub started_at: DateTime<Utc>,
    /// See [`NewProfileRun::request_count`].
    pub request_count: i64,
    /// See [`NewProfileRun::error_count`].
    pub error_count: i64,
    /// See [`NewProfileRun::ttft_p50_ms`].
    pub ttft_p50_ms: f64,
    /// See [`NewProfileRun::ttft_p99_ms`].
    pub ttft_p99_ms: f64,
    /// See [`NewProfileRun::tpot_p50_ms`].
    pub tpot_p50_ms: f64,
    /// See [`NewProfileRun::tpot_p99_ms`].
    pub tpot_p99_ms: f64,
    /// See [`NewProfileRun::e2e_p50_ms`].
    pub e2e_p50_ms: f64,
    /// See [`NewProfileRun::e2e_p99_ms`].
    pub e2e_p99_ms: f64,
    /// See [`NewProfileRun::output_tokens_per_s`].
    pub output_tokens_per_s: f64,
    /// See [`NewProfileRun::total_tokens_per_s`].
    pub total_tokens_per_s: f64,
    /// See [`NewProfileRun::goodput_requests_per_s`].
    pub goodput_requests_per_s: f64,
    /// See [`NewProfileRun::sla_attainment`].
    pub sla_attainment: f64,
    /// See [`NewProfileRun::peak_rss_bytes`].
    pub peak_rss_bytes: i64,
    /// See [`NewProfileRun::kernel_tier`].
    pub kernel_tier: String,
    /// The latest capacity result of this config on this host: its highest SLA-feasible rate.
    pub capacity_requests_per_s: Option<f64>,
    /// That capacity result's TTFT p99 target, in milliseconds.
    pub capacity_sla_ttft_p99_ms: Option<f64>,
    /// That capacity result's TPOT p99 target, in milliseconds.
    pub capacity_sla_tpot_p99_ms: Option<f64>,
    /// The latest quality result of this config: its perplexity.
    pub perplexity: Option<f64>,
    /// That result's top-1 agreement with the reference run (`None` for the reference itself).
    pub top1_agreement: Option<f64>,
    /// The perplexity of the same model's latest reference run (no top-1 agreement) on the same text.
    pub reference_perplexity: Option<f64>,
}

/// The column [`ConfigSummaryQuery`] sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfigSort {
    /// When the latest run started.
    #[default]
    StartedAt,
    /// The model's name, then the config's settings.
    Model,
    /// Output tokens per second.
    OutputTokensPerS,
    /// TTFT p50.
    TtftP50,
    /// TTFT p99.
    TtftP99,
    /// TPOT p99.
    TpotP99,
    /// E2E p99.
    E2eP99,
    /// Capacity at the SLA (configs without one last).
    Capacity,
    /// Top-1 agreement (configs without one last).
    Top1Agreement,
}

impl ConfigSort {
    /// Every sort key, in the order their names are listed.
    pub const ALL: [ConfigSort; 9] = [
        ConfigSort::StartedAt,
        ConfigSort::Model,
        ConfigSort::OutputTokensPerS,
        ConfigSort::TtftP50,
        ConfigSort::TtftP99,
        ConfigSort::TpotP99,
        ConfigSort::E2eP99,
        ConfigSort::Capacity,
        ConfigSort::Top1Agreement,
    ];

    /// The key's name in URLs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigSort::StartedAt => "started_at",
            ConfigSort::Model => "model",
            ConfigSort::OutputTokensPerS => "output_tokens_per_s",
            ConfigSort::TtftP50 => "ttft_p50",
            ConfigSort::TtftP99 => "ttft_p99",
            ConfigSort::TpotP99 => "tpot_p99",
            ConfigSort::E2eP99 => "e2e_p99",
            ConfigSort::Capacity => "capacity",
            ConfigSort::Top1Agreement => "top1_agreement",
        }
    }
}

impl FromStr for ConfigSort {
    type Err = UnknownSortKey;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        ConfigSort::ALL
            .into_iter()
            .find(|sort| sort.as_str() == name)
            .ok_or_else(|| UnknownSortKey(name.to_owned()))
    }
}

/// A sort key name that is not one of [`ConfigSort`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown sort key {0:?}: expected one of started_at, model, output_tokens_per_s, ttft_p50, ttft_p99, \
     tpot_p99, e2e_p99, capacity, top1_agreement"
)]
pub struct UnknownSortKey(pub String);

/// Which config summaries [`Store::list_config_summaries`](super::Store::list_config_summaries)
/// returns, in what order, and how many. Empty filters match everything.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ConfigSummaryQuery {
    /// Only this model, by name.
    pub model: Option<String>,
    /// Only this runtime weight type.
    pub weight_type: Option<String>,
    /// Only this host.
    pub hardware_id: Option<HardwareId>,
    /// Only this thread count.
    pub threads: Option<i64>,
    /// Only this batch size.
    pub max_batch: Option<i64>,
    /// Only this NUMA policy.
    pub numa_policy: Option<String>,
    /// The sort column.
    pub sort: ConfigSort,
    /// Largest first; ties are broken by run id in the same direction.
    pub descending: bool,
    /// At most this many rows; `None` for all.
    pub limit: Option<i64>,
}

/// Where a profiling job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Waiting for a controller.
    Queued,
    /// Claimed by a controller.
    Running,
    /// Finished.
    Done,
    /// Stopped by an error.
    Failed,
}

/// How a profiling job ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum JobOutcome {
    /// It finished, with the run it recorded if any.
    Done {
        /// The recorded run.
        run_id: Option<ProfileRunId>,
    },
    /// It failed.
    Failed {
        /// Why, for the operator.
        error: String,
    },
}

/// A recorded profiling job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct ProfileJobRow {
    /// Its id; jobs are claimed in id order.
    pub id: ProfileJobId,
    /// What to profile, as JSON.
    #[sqlx(json)]
    pub spec: Value,
    /// Where it is.
    #[sqlx(try_from = "String")]
    pub status: JobStatus,
    /// The controller that claimed it last.
    pub claimed_by: Option<String>,
    /// How many times it was claimed.
    pub attempts: i64,
    /// When it was queued.
    pub enqueued_at: DateTime<Utc>,
    /// When it was claimed last.
    pub claimed_at: Option<DateTime<Utc>>,
    /// When it finished.
    pub finished_at: Option<DateTime<Utc>>,
    /// The run it recorded, if done with one.
    pub run_id: Option<ProfileRunId>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// A status name that is not one of the enum's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} status {name:?}")]
pub struct UnknownStatus {
    kind: &'static str,
    name: String,
}

macro_rules! text_enum {
    ($ty:ident, $kind:literal, { $($variant:ident => $name:literal,)* }) => {
        impl $ty {
            /// The name stored in the database.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)*
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = UnknownStatus;

            fn from_str(name: &str) -> Result<Self, Self::Err> {
                match name {
                    $($name => Ok(Self::$variant),)*
                    _ => Err(UnknownStatus { kind: $kind, name: name.to_owned() }),
                }
            }
        }

        impl TryFrom<String> for $ty {
            type Error = UnknownStatus;

            fn try_from(name: String) -> Result<Self, Self::Error> {
                name.parse()
            }
        }
    };
}

text_enum!(PilotStatus, "pilot", {
    Pending => "pending",
    Running => "running",
    Done => "done",
    Failed => "failed",
});

text_enum!(JobStatus, "job", {
    Queued => "queued",
    Running => "running",
    Done => "done",
    Failed => "failed",
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_their_names() {
        for status in [
            JobStatus::Queued,
            JobStatus::Running,
            JobStatus::Done,
            JobStatus::Failed,
        ] {
            assert_eq!(status.as_str().parse::<JobStatus>(), Ok(status));
        }
        for status in [
            PilotStatus::Pending,
            PilotStatus::Running,
            PilotStatus::Done,
            PilotStatus::Failed,
        ] {
            assert_eq!(status.to_string().parse::<PilotStatus>(), Ok(status));
        }
        assert_eq!(
            "paused".parse::<JobStatus>().unwrap_err().to_string(),
            "unknown job status \"paused\""
        );
    }

    #[test]
    fn a_day_window_spans_one_utc_day() {
        let window = TimeWindow::day(NaiveDate::from_ymd_opt(2026, 3, 1).unwrap());
        assert_eq!(window.start.to_rfc3339(), "2026-03-01T00:00:00+00:00");
        assert_eq!(window.end.to_rfc3339(), "2026-03-02T00:00:00+00:00");
    }
}

/// An OpenAI-compatible endpoint measured from outside, to record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewEndpoint {
    /// Its base URL, without `/v1`.
    pub base_url: String,
    /// The model name it serves.
    pub model_name: String,
}

/// A recorded endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct EndpointRow {
    /// Its id.
    pub id: EndpointId,
    /// See [`NewEndpoint::base_url`].
    pub base_url: String,
    /// See [`NewEndpoint::model_name`].
    pub model_name: String,
    /// When it was first measured.
    pub created_at: DateTime<Utc>,
}

/// One measured run against an endpoint, to record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewEndpointRun {
    /// The endpoint measured.
    pub endpoint_id: EndpointId,
    /// When the load started.
    pub started_at: DateTime<Utc>,
    /// When the last request finished.
    pub finished_at: DateTime<Utc>,
    /// The API called: `completions` or `chat`.
    pub api: String,
    /// The shape of the offered load (arrival process, prompt and output lengths), as JSON.
    pub workload_shape: Value,
    /// Requests sent.
    pub request_count: i64,
    /// Requests that failed.
    pub error_count: i64,
    /// Time to first token, p50.
    pub ttft_p50_ms: f64,
    /// Time to first token, p99.
    pub ttft_p99_ms: f64,
    /// Mean time per output token, p50 over requests.
    pub tpot_p50_ms: f64,
    /// Mean time per output token, p99 over requests.
    pub tpot_p99_ms: f64,
    /// Arrival to last token, p50.
    pub e2e_p50_ms: f64,
    /// Arrival to last token, p99.
    pub e2e_p99_ms: f64,
    /// Output tokens per second.
    pub output_tokens_per_s: f64,
    /// Completed requests per second.
    pub requests_per_s: f64,
    /// Requests per second that met the SLA.
    pub goodput_requests_per_s: f64,
    /// The fraction of requests that met the SLA, 0 to 1.
    pub sla_attainment: f64,
    /// The load generator's whole report (every percentile, ITL, error samples), as JSON.
    pub report: Value,
    /// The version of the load generator that measured it.
    pub client_version: String,
}

/// A recorded endpoint run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct EndpointRunRow {
    /// Its id.
    pub id: EndpointRunId,
    /// See [`NewEndpointRun::endpoint_id`].
    pub endpoint_id: EndpointId,
    /// See [`NewEndpointRun::started_at`].
    pub started_at: DateTime<Utc>,
    /// See [`NewEndpointRun::finished_at`].
    pub finished_at: DateTime<Utc>,
    /// See [`NewEndpointRun::api`].
    pub api: String,
    /// See [`NewEndpointRun::workload_shape`].
    #[sqlx(json)]
    pub workload_shape: Value,
    /// See [`NewEndpointRun::request_count`].
    pub request_count: i64,
    /// See [`NewEndpointRun::error_count`].
    pub error_count: i64,
    /// See [`NewEndpointRun::ttft_p50_ms`].
    pub ttft_p50_ms: f64,
    /// See [`NewEndpointRun::ttft_p99_ms`].
    pub ttft_p99_ms: f64,
    /// See [`NewEndpointRun::tpot_p50_ms`].
    pub tpot_p50_ms: f64,
    /// See [`NewEndpointRun::tpot_p99_ms`].
    pub tpot_p99_ms: f64,
    /// See [`NewEndpointRun::e2e_p50_ms`].
    pub e2e_p50_ms: f64,
    /// See [`NewEndpointRun::e2e_p99_ms`].
    pub e2e_p99_ms: f64,
    /// See [`NewEndpointRun::output_tokens_per_s`].
    pub output_tokens_per_s: f64,
    /// See [`NewEndpointRun::requests_per_s`].
    pub requests_per_s: f64,
    /// See [`NewEndpointRun::goodput_requests_per_s`].
    pub goodput_requests_per_s: f64,
    /// See [`NewEndpointRun::sla_attainment`].
    pub sla_attainment: f64,
    /// See [`NewEndpointRun::report`].
    #[sqlx(json)]
    pub report: Value,
    /// See [`NewEndpointRun::client_version`].
    pub client_version: String,
}
