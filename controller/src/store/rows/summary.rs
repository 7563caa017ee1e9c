//! The dashboard's config table: one summary row per config and host, and how to filter and sort them.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::FromRow;

use super::{ConfigId, HardwareId, ModelId, ProfileRunId};

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
    /// Whether the model's weights are random (see [`NewModel::synthetic`](super::NewModel::synthetic)).
    pub model_synthetic: bool,
    /// See [`NewConfig::weight_type`](super::NewConfig::weight_type).
    pub weight_type: String,
    /// See [`NewConfig::threads`](super::NewConfig::threads).
    pub threads: i64,
    /// See [`NewConfig::max_batch`](super::NewConfig::max_batch).
    pub max_batch: i64,
    /// See [`NewConfig::numa_policy`](super::NewConfig::numa_policy).
    pub numa_policy: String,
    /// See [`NewConfig::kv_memory_mib`](super::NewConfig::kv_memory_mib).
    pub kv_memory_mib: i64,
    /// See [`NewHardware::cpu_model`](super::NewHardware::cpu_model).
    pub cpu_model: String,
    /// See [`NewHardware::cores`](super::NewHardware::cores).
    pub cores: i64,
    /// See [`NewHardware::numa_nodes`](super::NewHardware::numa_nodes).
    pub numa_nodes: i64,
    /// See [`NewProfileRun::started_at`](super::NewProfileRun::started_at).
    pub started_at: DateTime<Utc>,
    /// See [`NewProfileRun::request_count`](super::NewProfileRun::request_count).
    pub request_count: i64,
    /// See [`NewProfileRun::error_count`](super::NewProfileRun::error_count).
    pub error_count: i64,
    /// See [`NewProfileRun::ttft_p50_ms`](super::NewProfileRun::ttft_p50_ms).
    pub ttft_p50_ms: f64,
    /// See [`NewProfileRun::ttft_p99_ms`](super::NewProfileRun::ttft_p99_ms).
    pub ttft_p99_ms: f64,
    /// See [`NewProfileRun::tpot_p50_ms`](super::NewProfileRun::tpot_p50_ms).
    pub tpot_p50_ms: f64,
    /// See [`NewProfileRun::tpot_p99_ms`](super::NewProfileRun::tpot_p99_ms).
    pub tpot_p99_ms: f64,
    /// See [`NewProfileRun::e2e_p50_ms`](super::NewProfileRun::e2e_p50_ms).
    pub e2e_p50_ms: f64,
    /// See [`NewProfileRun::e2e_p99_ms`](super::NewProfileRun::e2e_p99_ms).
    pub e2e_p99_ms: f64,
    /// See [`NewProfileRun::output_tokens_per_s`](super::NewProfileRun::output_tokens_per_s).
    pub output_tokens_per_s: f64,
    /// See [`NewProfileRun::total_tokens_per_s`](super::NewProfileRun::total_tokens_per_s).
    pub total_tokens_per_s: f64,
    /// See [`NewProfileRun::goodput_requests_per_s`](super::NewProfileRun::goodput_requests_per_s).
    pub goodput_requests_per_s: f64,
    /// See [`NewProfileRun::sla_attainment`](super::NewProfileRun::sla_attainment).
    pub sla_attainment: f64,
    /// See [`NewProfileRun::peak_rss_bytes`](super::NewProfileRun::peak_rss_bytes).
    pub peak_rss_bytes: i64,
    /// See [`NewProfileRun::kernel_tier`](super::NewProfileRun::kernel_tier).
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

/// Which config summaries [`Store::list_config_summaries`](crate::store::Store::list_config_summaries)
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
