//! The serde types of the gateway's TOML file, as written and read: the gateway validates a
//! [`GatewayConfigFile`] into its own config, and the pilot writes one for its replay.

use serde::{Deserialize, Serialize};
use strata_planner::{route::PoolKind, service::ServiceCurve, workload::BudgetAction};

use crate::planning::ProfileSelector;

/// Largest total size of request headers the gateway takes by default, bytes (32 KiB).
pub const DEFAULT_MAX_HEADER_BYTES: usize = 32 << 10;

/// The file as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfigFile {
    /// Address to listen on, e.g. `127.0.0.1:8080`.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The SLA class of requests without `x-strata-sla` and without a per-key default.
    pub default_class: String,
    /// Environment variable holding the admin bearer token; admin routes are off without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_token_env: Option<String>,
    /// Largest request body, bytes.
    #[serde(default = "default_body")]
    pub max_body_bytes: usize,
    /// Largest total size of request headers, bytes.
    #[serde(default = "default_headers")]
    pub max_header_bytes: usize,
    /// Requests handled at once by the gateway; more get 429.
    #[serde(default = "default_concurrency")]
    pub max_concurrency: usize,
    /// Timeouts and the connection cap of the gateway's own listener.
    #[serde(default)]
    pub listener: ListenerFile,
    /// Retries on other endpoints before the first byte.
    #[serde(default)]
    pub retry: RetryFile,
    /// Circuit breaker per endpoint.
    #[serde(default)]
    pub breaker: BreakerFile,
    /// Active health checks.
    #[serde(default)]
    pub health: HealthFile,
    /// The store's plan and the accounting writer.
    #[serde(default)]
    pub store: StoreFile,
    /// Pools, CPU and GPU.
    #[serde(default, rename = "pool")]
    pub pools: Vec<PoolFile>,
    /// SLA classes.
    #[serde(default, rename = "class")]
    pub classes: Vec<ClassFile>,
    /// Client API keys (none: the `/v1` routes are open).
    #[serde(default, rename = "api_key")]
    pub api_keys: Vec<ApiKeyFile>,
    /// The budget.
    #[serde(default)]
    pub budget: BudgetFile,
}

impl GatewayConfigFile {
    /// A file listening on `listen` with `classes` and `pools`, every other key at its default.
    pub fn new(
        listen: String,
        default_class: String,
        classes: Vec<ClassFile>,
        pools: Vec<PoolFile>,
    ) -> Self {
        Self {
            listen,
            default_class,
            admin_token_env: None,
            max_body_bytes: default_body(),
            max_header_bytes: default_headers(),
            max_concurrency: default_concurrency(),
            listener: ListenerFile::default(),
            retry: RetryFile::default(),
            breaker: BreakerFile::default(),
            health: HealthFile::default(),
            store: StoreFile::default(),
            pools,
            classes,
            api_keys: Vec::new(),
            budget: BudgetFile::default(),
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:8080".into()
}
fn default_body() -> usize {
    4 << 20
}
fn default_headers() -> usize {
    DEFAULT_MAX_HEADER_BYTES
}
fn default_concurrency() -> usize {
    4096
}

/// `[listener]`: what a client connection may take; read when the gateway starts listening, so
/// `/admin/reload` leaves the running listener's limits as they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenerFile {
    /// Time from a request's first byte to the end of its headers, ms; past it the connection closes.
    pub header_timeout_ms: u64,
    /// Time from the end of a request's headers to the end of its body, ms; past it the answer is 408.
    pub body_timeout_ms: u64,
    /// Time a kept-alive connection may wait for its next request, ms.
    pub idle_timeout_ms: u64,
    /// Connections open at once; more wait to be accepted.
    pub max_connections: usize,
}

impl Default for ListenerFile {
    /// Headers within 10 s, a body within 30 s, 60 s idle, 1024 connections.
    fn default() -> Self {
        Self {
            header_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            max_connections: 1024,
        }
    }
}

/// `[retry]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryFile {
    /// Attempts in all (first try included).
    pub attempts: u32,
    /// Backoff before the second attempt, doubled after each, ms.
    pub backoff_ms: u64,
}

impl Default for RetryFile {
    fn default() -> Self {
        Self {
            attempts: 3,
            backoff_ms: 10,
        }
    }
}

/// `[breaker]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerFile {
    /// Consecutive failures that open the breaker.
    pub failures: u32,
    /// How long it stays open before one probe, ms (doubled on each failed probe, up to 16x).
    pub open_ms: u64,
}

impl Default for BreakerFile {
    fn default() -> Self {
        Self {
            failures: 5,
            open_ms: 2000,
        }
    }
}

/// `[health]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthFile {
    /// Seconds between checks of each endpoint, ms; 0 turns active checks off.
    pub interval_ms: u64,
    /// Path checked with GET (2xx is healthy).
    pub path: String,
    /// Check timeout, ms.
    pub timeout_ms: u64,
}

impl Default for HealthFile {
    fn default() -> Self {
        Self {
            interval_ms: 2000,
            path: "/v1/models".into(),
            timeout_ms: 1000,
        }
    }
}

/// `[store]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreFile {
    /// The workload whose latest plan drives the GPU/shed shares (none: no plan shares).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// How often the plan and the ledger totals are re-read, ms.
    pub refresh_ms: u64,
    /// Ledger and decision rows written per batch at most.
    pub batch: usize,
    /// How long the writer waits to fill a batch, ms.
    pub flush_ms: u64,
    /// Rows kept in memory while the store is down; beyond, the oldest are dropped and counted.
    pub queue: usize,
}

impl Default for StoreFile {
    fn default() -> Self {
        Self {
            workload: None,
            refresh_ms: 10_000,
            batch: 256,
            flush_ms: 200,
            queue: 100_000,
        }
    }
}

/// `[[pool]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolFile {
    /// Its name (metrics, ledger, `x-strata-route`).
    pub name: String,
    /// `cpu` or `gpu`.
    pub kind: PoolKind,
    /// Its endpoints.
    #[serde(rename = "endpoint")]
    pub endpoints: Vec<EndpointFile>,
    /// Model names the pool serves.
    pub models: Vec<String>,
    /// Requests in flight per endpoint at most (more make that endpoint look full to the router).
    #[serde(default = "default_endpoint_concurrency")]
    pub max_concurrency: u32,
    /// Price per hour of one endpoint, USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_hour_usd: Option<f64>,
    /// Price per million tokens (prompt + output), USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_million_tokens_usd: Option<f64>,
    /// Measured tokens/s one endpoint serves at full load (prices per-hour pools per token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<f64>,
    /// Service model of one CPU endpoint (slots, prefill tokens/s, TPOT by batch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceCurve>,
    /// Or the stored profile the CPU service model is read from at start and on reload
    /// (`{ model, weights, threads, max_batch, hardware }`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<ProfileSelector>,
    /// GPU: p99 TTFT, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_p99_ms: Option<f64>,
    /// GPU: p99 time per output token, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_p99_ms: Option<f64>,
    /// Connect timeout, ms.
    #[serde(default = "default_connect_ms")]
    pub connect_timeout_ms: u64,
    /// Time to the response head, ms (then the request is retried elsewhere).
    #[serde(default = "default_first_byte_ms")]
    pub first_byte_timeout_ms: u64,
    /// Longest silence between body chunks, ms.
    #[serde(default = "default_idle_ms")]
    pub idle_timeout_ms: u64,
}

impl PoolFile {
    /// A pool of `kind` serving `models` on `endpoints`, unpriced, every other key at its default.
    pub fn new(
        name: String,
        kind: PoolKind,
        models: Vec<String>,
        endpoints: Vec<EndpointFile>,
    ) -> Self {
        Self {
            name,
            kind,
            endpoints,
            models,
            max_concurrency: default_endpoint_concurrency(),
            price_per_hour_usd: None,
            price_per_million_tokens_usd: None,
            tokens_per_s: None,
            service: None,
            profile: None,
            ttft_p99_ms: None,
            tpot_p99_ms: None,
            connect_timeout_ms: default_connect_ms(),
            first_byte_timeout_ms: default_first_byte_ms(),
            idle_timeout_ms: default_idle_ms(),
        }
    }
}

fn default_endpoint_concurrency() -> u32 {
    64
}
fn default_connect_ms() -> u64 {
    1000
}
fn default_first_byte_ms() -> u64 {
    30_000
}
fn default_idle_ms() -> u64 {
    30_000
}

/// `[[pool.endpoint]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointFile {
    /// Base URL, `http://host:port` (the `/v1/...` path is appended).
    pub url: String,
    /// Its name [default: host:port of the URL].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Environment variable with the upstream's API key, sent as `Authorization: Bearer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
}

/// `[[class]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassFile {
    /// Its name, sent in `x-strata-sla`.
    pub name: String,
    /// p99 TTFT target, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_p99_ms: Option<f64>,
    /// p99 E2E target, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_p99_ms: Option<f64>,
    /// Higher is more important; the budget rejects the lowest first.
    #[serde(default)]
    pub priority: u32,
    /// Output tokens planned for when the request gives no `max_tokens`.
    #[serde(default = "default_output")]
    pub default_output_tokens: u32,
}

fn default_output() -> u32 {
    256
}

/// `[[api_key]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyFile {
    /// A name for metrics and logs (never the key).
    pub name: String,
    /// Environment variable holding the key.
    pub key_env: String,
    /// SLA class of this key's requests without `x-strata-sla`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Requests per second allowed (none: unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// Burst above the rate [default: one second's worth].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<f64>,
}

/// `[budget]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetFile {
    /// USD per UTC day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_day_usd: Option<f64>,
    /// USD per UTC calendar month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_month_usd: Option<f64>,
    /// Actions past spent fractions (`relax_sla`, `cap_gpu_share`, `reject_below_priority`).
    #[serde(default, rename = "action")]
    pub actions: Vec<BudgetAction>,
}
