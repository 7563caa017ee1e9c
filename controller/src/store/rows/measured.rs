//! What profiling records: hosts, models, configs, their runs, capacity and quality results, jobs,
//! and endpoints measured from outside.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::FromRow;

use super::{
    CapacityResultId, ConfigId, EndpointId, EndpointRunId, HardwareId, JobStatus, ModelId,
    ProfileJobId, ProfileRunId, QualityResultId,
};

new_and_row! {
    /// A CPU host to record, as measured by fingerprinting.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
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
        #[sqlx(json)]
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
        ..
        /// When it was recorded.
        pub created_at: DateTime<Utc>,
    }
}

new_and_row! {
    /// A model file to record.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
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
        ..
        /// When it was recorded.
        pub created_at: DateTime<Utc>,
    }
}

new_and_row! {
    /// A config to record: a model and the settings it runs with. The combination is unique.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, FromRow)]
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
        ..
        /// When it was recorded.
        pub created_at: DateTime<Utc>,
    }
}

new_and_row! {
    /// One profiling run's results, to record. Latencies are percentiles, in milliseconds, with the
    /// definitions of the design's metrics section.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
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
        #[sqlx(json)]
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
        ..
    }
}

new_and_row! {
    /// The highest load a config sustains on a host within SLA targets, to record.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
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
        #[sqlx(json)]
        pub load_curve: Value,
        /// The engine's step model fitted from its timings during the search, as JSON, when it had one.
        #[sqlx(json(nullable))]
        pub step_model: Option<Value>,
    }

    /// A recorded capacity result. See [`NewCapacityResult`] for the fields.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
    pub struct CapacityResultRow {
        /// Its id.
        pub id: CapacityResultId,
        ..
        /// When it was recorded.
        pub created_at: DateTime<Utc>,
    }
}

new_and_row! {
    /// Output quality of a config on a fixed text, to record.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
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
        ..
        /// When it was recorded.
        pub created_at: DateTime<Utc>,
    }
}

new_and_row! {
    /// An OpenAI-compatible endpoint measured from outside, to record.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
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
        ..
        /// When it was first measured.
        pub created_at: DateTime<Utc>,
    }
}

new_and_row! {
    /// One measured run against an endpoint, to record.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
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
        #[sqlx(json)]
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
        #[sqlx(json)]
        pub report: Value,
        /// The version of the load generator that measured it.
        pub client_version: String,
    }

    /// A recorded endpoint run.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
    pub struct EndpointRunRow {
        /// Its id.
        pub id: EndpointRunId,
        ..
    }
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
