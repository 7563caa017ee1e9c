//! The gateway: an OpenAI-compatible front (`/v1/chat/completions`, `/v1/completions`, `/v1/models`)
//! that decides per request whether a CPU pool will meet the request's SLA class and otherwise sends it
//! to a GPU fallback, through the planner's pure [`route`].
//!
//! Per request: the client key picks a default SLA class (`x-strata-sla` overrides), the body is read
//! once (size-limited) and peeked at for `model`, `stream` and `max_tokens`; prompt tokens are estimated
//! as body bytes / 4 and output tokens as `max_tokens` (else the class's `default_output_tokens`). Each
//! pool's live state (per-endpoint in-flight count, EWMA of TTFT and of time per output token, breaker
//! state, drains), the pool's service curve from the config, the budget state from the ledger and the
//! current hour of the stored plan go into [`route`]; within a pool it picks the less loaded of two
//! random endpoints. A failure before the first byte reaches the client (connect error, timeout, 5xx,
//! 429) is retried with backoff on another endpoint, and when a CPU pool has none left the router fails
//! over to GPU. Answers stream through chunk by chunk. `x-strata-route` names the pool, the endpoint and
//! the reason; `POST /v1/route` returns the decision without forwarding.
//!
//! Cost: a per-token price is charged on prompt + output tokens; a per-hour price is charged as the
//! request's share of an endpoint-hour at the pool's measured `tokens_per_s`. Tokens come from the
//! upstream's `usage` (asked for on streams with `stream_options.include_usage`, and the extra usage event
//! is dropped when the client did not ask for it), else from the estimate above.

pub mod accounting;
pub mod config;
pub mod health;
pub mod metrics;
mod prompt;
pub mod upstream;

use std::{
    path::PathBuf,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    body::{Body, Bytes, to_bytes},
    extract::{Path, Request, State},
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{Value, json};
use strata_controller::store::{LIVE_TRAFFIC, NewGatewayDecision};

pub use accounting::{LazyStore, StoreSink};
use strata_planner::{
    plan::Plan,
    route::{
        BudgetState, InstanceLoad, PoolKind, PoolState, Reason, RouteDecision, RoutePolicy,
        RouteRequest, Target, route,
    },
};
use tokio::sync::Semaphore;

use crate::{openai_error::ApiError, server::constant_time_eq};
use accounting::{Accounting, Record, Sink};
use config::{ApiKeyConfig, EndpointConfig, Env, GatewayConfig, PoolConfig};
use health::{Breaker, EndpointHealth, Prober};
use upstream::{ErrorSource, Relay, StreamEnd, StreamSummary, UpstreamError};

/// The request header that names the SLA class.
pub const SLA_HEADER: &str = strata_controller::loadgen::SLA_CLASS_HEADER;
/// The response header that says where a request went and why.
pub const ROUTE_HEADER: &str = strata_controller::loadgen::ROUTE_HEADER;
/// The request/response header carrying the request id.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Errors starting the gateway.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The configuration file cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Metrics could not be registered.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// An HTTP client could not be built.
    #[error("http client: {0}")]
    Client(#[from] reqwest::Error),
    /// The listener failed.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// One upstream endpoint and its live state.
#[derive(Debug)]
pub struct Endpoint {
    /// A process-unique id.
    pub id: usize,
    /// Its configuration.
    pub config: EndpointConfig,
    /// Breaker, load and latency.
    pub health: EndpointHealth,
}

/// One pool.
#[derive(Debug)]
pub struct Pool {
    /// Its configuration.
    pub config: PoolConfig,
    /// Its endpoints.
    pub endpoints: Vec<Arc<Endpoint>>,
    /// Set by an admin drain: no new requests.
    pub drained: AtomicBool,
    client: reqwest::Client,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// A client key and its rate-limit bucket.
#[derive(Debug)]
pub struct KeyState {
    /// Its configuration.
    pub config: ApiKeyConfig,
    bucket: Mutex<Bucket>,
}

impl KeyState {
    fn allow(&self, now: Instant) -> bool {
        let Some((rate, burst)) = self.config.rate else {
            return true;
        };
        let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let dt = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + dt * rate).min(burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What a configuration turns into: swapped whole on reload.
#[derive(Debug)]
pub struct Table {
    /// The configuration.
    pub config: Arc<GatewayConfig>,
    /// Pools in config order.
    pub pools: Vec<Pool>,
    /// Client keys.
    pub keys: Vec<KeyState>,
}

#[derive(Debug, Default)]
struct PlanShares {
    gpu: Vec<f64>,
    shed: Vec<f64>,
}

/// Everything the handlers share.
pub struct GatewayState {
    table: RwLock<Arc<Table>>,
    plan: RwLock<Arc<PlanShares>>,
    /// HTTP client for health checks.
    pub client: reqwest::Client,
    /// Metrics.
    pub metrics: metrics::Metrics,
    /// The accounting queue.
    pub accounting: Arc<Accounting>,
    sink: Option<Arc<dyn Sink>>,
    config_path: Option<PathBuf>,
    ids: AtomicU64,
    endpoint_ids: AtomicUsize,
    rng: AtomicU64,
    started: u64,
    stopping: AtomicBool,
    slots: Arc<Semaphore>,
}

impl std::fmt::Debug for GatewayState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayState").finish_non_exhaustive()
    }
}

impl GatewayState {
    /// State for `config`; `sink` receives accounting rows and gives plans and ledger totals (none: kept
    /// in memory only); `config_path` is re-read by `POST /admin/reload`.
    ///
    /// # Errors
    /// When metrics or HTTP clients cannot be built.
    pub fn new(
        config: GatewayConfig,
        sink: Option<Arc<dyn Sink>>,
        config_path: Option<PathBuf>,
    ) -> Result<Arc<Self>, GatewayError> {
        let accounting = Arc::new(Accounting::new(
            config.store.queue,
            config.store.batch,
            Duration::from_millis(config.store.flush_ms.max(1)),
        ));
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let slots = Arc::new(Semaphore::new(config.max_concurrency));
        let state = Self {
            table: RwLock::new(Arc::new(Table {
                config: Arc::new(config.clone()),
                pools: Vec::new(),
                keys: Vec::new(),
            })),
            plan: RwLock::new(Arc::new(PlanShares::default())),
            client: upstream::client(Duration::from_secs(1))?,
            metrics: metrics::Metrics::new()?,
            accounting,
            sink,
            config_path,
            ids: AtomicU64::new(0),
            endpoint_ids: AtomicUsize::new(0),
            rng: AtomicU64::new(started ^ 0x9e37_79b9_7f4a_7c15),
            started,
            stopping: AtomicBool::new(false),
            slots,
        };
        let table = state.build_table(config, None)?;
        *state.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
        Ok(Arc::new(state))
    }

    /// Builds the pools of `config`, keeping the live state of endpoints that `old` already had (same
    /// name and URL).
    fn build_table(
        &self,
        config: GatewayConfig,
        old: Option<&Table>,
    ) -> Result<Table, GatewayError> {
        let mut pools = Vec::new();
        // With active checks the checker probes open breakers; without, live traffic must.
        let prober = if config.health_interval.is_zero() {
            Prober::Traffic
        } else {
            Prober::HealthChecks
        };
        for p in &config.pools {
            let endpoints = p
                .endpoints
                .iter()
                .map(|e| {
                    old.and_then(|t| {
                        t.pools
                            .iter()
                            .flat_map(|p| p.endpoints.iter())
                            .find(|x| x.config.name == e.name && x.config.url == e.url)
                            .cloned()
                    })
                    .unwrap_or_else(|| {
                        Arc::new(Endpoint {
                            id: self.endpoint_ids.fetch_add(1, Ordering::Relaxed),
                            config: e.clone(),
                            health: EndpointHealth::new(
                                Breaker::new(config.breaker_failures, config.breaker_open)
                                    .probed_by(prober),
                            ),
                        })
                    })
                })
                .collect();
            pools.push(Pool {
                client: upstream::client(p.connect_timeout)?,
                config: p.clone(),
                endpoints,
                drained: AtomicBool::new(false),
            });
        }
        let keys = config
            .api_keys
            .iter()
            .map(|k| KeyState {
                config: k.clone(),
                bucket: Mutex::new(Bucket {
                    tokens: k.rate.map_or(0.0, |(_, burst)| burst),
                    at: Instant::now(),
                }),
            })
            .collect();
        Ok(Table {
            config: Arc::new(config),
            pools,
            keys,
        })
    }

    /// The current pools and keys.
    pub fn table(&self) -> Arc<Table> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The current configuration.
    pub fn config(&self) -> Arc<GatewayConfig> {
        self.table().config.clone()
    }

    /// True once shutdown began.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    fn next_id(&self) -> String {
        format!(
            "gw-{:x}-{:x}",
            self.started,
            self.ids.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// A pseudo-random draw (splitmix64 over a shared counter): no lock, good enough for P2C and plan
    /// shares.
    fn draw(&self) -> u64 {
        let mut z = self
            .rng
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Re-reads the plan (current UTC hour) and the ledger totals from the sink.
    pub async fn refresh(&self) {
        let Some(sink) = &self.sink else {
            return;
        };
        let now = Utc::now();
        if let Err(e) = self.accounting.refresh(sink.as_ref(), now).await {
            tracing::debug!(error = %e, "ledger totals not refreshed");
        }
        let config = self.config();
        let Some(workload) = &config.store.workload else {
            return;
        };
        match sink.plan(workload).await {
            Ok(Some(json)) => match serde_json::from_value::<Plan>(json) {
                Ok(plan) => {
                    let hour = now.format("%H").to_string().parse::<u32>().unwrap_or(0);
                    if let Some(h) = plan.hours.iter().find(|h| h.hour == hour) {
                        let share = |f: fn(&strata_planner::plan::ClassHour) -> f64| {
                            config
                                .classes
                                .iter()
                                .map(|c| {
                                    h.classes.iter().find(|x| x.class == c.name).map_or(0.0, f)
                                })
                                .collect()
                        };
                        let shares = PlanShares {
                            gpu: share(|c| c.gpu_share),
                            shed: share(|c| c.shed_share),
                        };
                        *self.plan.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(shares);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, workload, "the stored plan does not parse; keeping the last")
                }
            },
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, "plan not refreshed; keeping the last"),
        }
    }

    /// Reloads the configuration file, reading stored profiles again.
    ///
    /// # Errors
    /// When there is no file, it cannot be read, or it is invalid; the running config stays.
    pub async fn reload(&self) -> Result<(), GatewayError> {
        let Some(path) = &self.config_path else {
            return Err(GatewayError::Config(config::ConfigError {
                key: "(file)".into(),
                problem: "the gateway was started without a config file".into(),
            }));
        };
        let text = std::fs::read_to_string(path).map_err(|source| GatewayError::Read {
            path: path.clone(),
            source,
        })?;
        let mut config = GatewayConfig::from_toml(&text, &Env)?;
        config.resolve_stored_profiles(self.sink.as_deref()).await?;
        let old = self.table();
        let table = self.build_table(config, Some(&old))?;
        *self.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
        Ok(())
    }
}

/// The gateway's routes over `state`.
pub fn router(state: Arc<GatewayState>) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/route", post(dry_run))
        .route("/v1/models", get(models))
        .layer(middleware::from_fn_with_state(state.clone(), authenticate));
    let admin = Router::new()
        .route("/admin/reload", post(admin_reload))
        .route("/admin/pools/{name}/drain", post(admin_drain))
        .route("/admin/pools/{name}/undrain", post(admin_undrain))
        .route("/admin/state", get(admin_state))
        .layer(middleware::from_fn_with_state(state.clone(), admin_auth));
    Router::new()
        .merge(v1)
        .merge(admin)
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .fallback(not_found)
        .method_not_allowed_fallback(ApiError::method_not_allowed)
        .with_state(state)
}

/// Background tasks: health checks, plan/ledger refresh, the accounting writer.
#[derive(Debug)]
pub struct Background {
    health: tokio::task::JoinHandle<()>,
    refresh: tokio::task::JoinHandle<()>,
    writer: tokio::task::JoinHandle<()>,
}

/// Starts the background tasks of `state`.
pub fn start_background(state: &Arc<GatewayState>) -> Background {
    let health = tokio::spawn(health::check_loop(state.clone()));
    let s = state.clone();
    let refresh = tokio::spawn(async move {
        loop {
            s.refresh().await;
            let every = Duration::from_millis(s.config().store.refresh_ms.max(100));
            tokio::time::sleep(every).await;
            if s.stopping() {
                return;
            }
        }
    });
    let writer = tokio::spawn(
        state
            .accounting
            .clone()
            .writer(state.sink.clone(), Duration::from_secs(5)),
    );
    Background {
        health,
        refresh,
        writer,
    }
}

/// Serves `state` on `listener` under the config's listener limits until `shutdown` resolves, lets
/// in-flight requests (streams included) finish, then flushes the accounting queue (for at most 5 s).
pub async fn serve(
    state: Arc<GatewayState>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let background = start_background(&state);
    let limits = state.config().listener;
    crate::listener::serve(listener, router(state.clone()), limits, shutdown).await;
    state.stopping.store(true, Ordering::Relaxed);
    background.health.abort();
    background.refresh.abort();
    state.accounting.stop();
    let _ = background.writer.await;
}

/// Runs the gateway for `config` with `store` (none: accounting in memory, no plan) until `shutdown`.
/// Use [`accounting::LazyStore`] for a store that may be down at start.
///
/// # Errors
/// When the gateway cannot start or listen.
pub async fn run(
    config: GatewayConfig,
    store: Option<Arc<dyn Sink>>,
    config_path: Option<PathBuf>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), GatewayError> {
    let addr = config.listen;
    let sink = store;
    let mut config = config;
    config.resolve_stored_profiles(sink.as_deref()).await?;
    let state = GatewayState::new(config, sink, config_path)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| GatewayError::Listen { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| GatewayError::Listen { addr, source })?;
    tracing::info!("gateway on http://{bound}");
    // A line on stdout that scripts and tests wait for.
    println!("listening on http://{bound}");
    serve(state, listener, shutdown).await;
    Ok(())
}

/// The key a request authenticated with (index into the table's keys).
#[derive(Debug, Clone, Copy)]
struct KeyIndex(Option<usize>);

fn bearer(headers: &HeaderMap) -> &str {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
}

async fn authenticate(
    State(state): State<Arc<GatewayState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let table = state.table();
    if table.keys.is_empty() {
        request.extensions_mut().insert(KeyIndex(None));
        return next.run(request).await;
    }
    let given = bearer(request.headers()).as_bytes();
    // Every key is compared (no early exit), so timing does not say which one nearly matched.
    let mut found = None;
    for (i, k) in table.keys.iter().enumerate() {
        if constant_time_eq(given, k.config.key.as_bytes()) {
            found = Some(i);
        }
    }
    let Some(i) = found else {
        return ApiError::unauthorized().into_response();
    };
    if !table.keys[i].allow(Instant::now()) {
        let mut e = ApiError::overloaded(format!(
            "Rate limit of key `{}` exceeded",
            table.keys[i].config.name
        ));
        e.code = Some("rate_limit_exceeded");
        return e.into_response();
    }
    request.extensions_mut().insert(KeyIndex(Some(i)));
    next.run(request).await
}

async fn admin_auth(
    State(state): State<Arc<GatewayState>>,
    request: Request,
    next: Next,
) -> Response {
    let config = state.config();
    let Some(token) = &config.admin_token else {
        return not_found().await.into_response();
    };
    if !constant_time_eq(bearer(request.headers()).as_bytes(), token.as_bytes()) {
        return ApiError::unauthorized().into_response();
    }
    next.run(request).await
}

async fn admin_reload(State(state): State<Arc<GatewayState>>) -> Response {
    match state.reload().await {
        Ok(()) => Json(json!({"reloaded": true})).into_response(),
        Err(e) => ApiError::invalid(e.to_string()).into_response(),
    }
}

fn set_drain(state: &GatewayState, name: &str, drained: bool) -> Response {
    let table = state.table();
    match table.pools.iter().find(|p| p.config.name == name) {
        Some(p) => {
            p.drained.store(drained, Ordering::Relaxed);
            let in_flight: u32 = p
                .endpoints
                .iter()
                .map(|e| e.health.in_flight.load(Ordering::Relaxed))
                .sum();
            Json(json!({"pool": name, "drained": drained, "in_flight": in_flight})).into_response()
        }
        None => ApiError {
            status: StatusCode::NOT_FOUND,
            ..ApiError::invalid(format!("no pool named `{name}`"))
        }
        .into_response(),
    }
}

async fn admin_drain(State(state): State<Arc<GatewayState>>, Path(name): Path<String>) -> Response {
    set_drain(&state, &name, true)
}

async fn admin_undrain(
    State(state): State<Arc<GatewayState>>,
    Path(name): Path<String>,
) -> Response {
    set_drain(&state, &name, false)
}

async fn admin_state(State(state): State<Arc<GatewayState>>) -> Response {
    let table = state.table();
    let now = Instant::now();
    let pools: Vec<Value> = table
        .pools
        .iter()
        .map(|p| {
            let endpoints: Vec<Value> = p
                .endpoints
                .iter()
                .map(|e| {
                    let (ttft, tpot) = e.health.latency(now);
                    json!({
                        "name": e.config.name,
                        "in_flight": e.health.in_flight.load(Ordering::Relaxed),
                        "breaker": format!("{:?}", e.health.breaker_state().gauge()),
                        "available": e.health.available(now),
                        "ewma_ttft_ms": ttft * 1e3,
                        "ewma_tpot_ms": tpot * 1e3,
                        "completed": e.health.completed.load(Ordering::Relaxed),
                    })
                })
                .collect();
            json!({"name": p.config.name, "drained": p.drained.load(Ordering::Relaxed), "endpoints": endpoints})
        })
        .collect();
    let (day, month, gpu_share) = state.accounting.spent(Utc::now());
    Json(json!({
        "pools": pools,
        "spent_today_usd": day,
        "spent_month_usd": month,
        "gpu_share_today": gpu_share,
        "accounting_queue": state.accounting.queued(),
        "accounting_written": state.accounting.written.load(Ordering::Relaxed),
        "accounting_dropped": state.accounting.dropped.load(Ordering::Relaxed),
        "store_down": state.accounting.store_down.load(Ordering::Relaxed),
    }))
    .into_response()
}

async fn not_found() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        ..ApiError::invalid(
            "Unknown route; see /v1/chat/completions, /v1/completions, /v1/models, /v1/route",
        )
    }
}

async fn health(State(state): State<Arc<GatewayState>>) -> Response {
    let table = state.table();
    let now = Instant::now();
    let pools: Vec<Value> = table
        .pools
        .iter()
        .map(|p| {
            let up = p
                .endpoints
                .iter()
                .filter(|e| e.health.available(now))
                .count();
            json!({"name": p.config.name, "endpoints_up": up, "endpoints": p.endpoints.len()})
        })
        .collect();
    Json(json!({"status": "ok", "pools": pools})).into_response()
}

async fn metrics_text(State(state): State<Arc<GatewayState>>) -> Response {
    let table = state.table();
    let m = &state.metrics;
    for p in &table.pools {
        for e in &p.endpoints {
            m.breaker
                .with_label_values(&[e.config.name.as_str()])
                .set(e.health.breaker_state().gauge());
            m.in_flight
                .with_label_values(&[e.config.name.as_str()])
                .set(i64::from(e.health.in_flight.load(Ordering::Relaxed)));
        }
    }
    let (day, month, _) = state.accounting.spent(Utc::now());
    m.spend.with_label_values(&["day", "spent"]).set(day);
    m.spend.with_label_values(&["month", "spent"]).set(month);
    if let Some(b) = table.config.budget_per_day {
        m.spend.with_label_values(&["day", "budget"]).set(b);
    }
    if let Some(b) = table.config.budget_per_month {
        m.spend.with_label_values(&["month", "budget"]).set(b);
    }
    m.accounting_queue.set(state.accounting.queued() as i64);
    m.accounting_dropped
        .set(state.accounting.dropped.load(Ordering::Relaxed) as i64);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        m.render(),
    )
        .into_response()
}

async fn models(State(state): State<Arc<GatewayState>>) -> Response {
    let table = state.table();
    let mut names: Vec<&str> = Vec::new();
    for p in &table.pools {
        for m in &p.config.models {
            if !names.contains(&m.as_str()) {
                names.push(m);
            }
        }
    }
    let data: Vec<Value> = names
        .iter()
        .map(|n| json!({"id": n, "object": "model", "created": state.started, "owned_by": "strata-gateway"}))
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// The fields the gateway looks at; the body is forwarded as it came.
#[derive(Debug, Deserialize)]
struct Peek {
    model: Option<String>,
    #[serde(default)]
    prompt: prompt::TokenIds,
    #[serde(default)]
    stream: bool,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    stream_options: Option<StreamOptions>,
}

/// Which OpenAI endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Completions,
}

impl Api {
    fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Completions => "/v1/completions",
        }
    }
}

/// A parsed request, ready to route.
struct Prepared {
    id: String,
    class: usize,
    model: String,
    stream: bool,
    client_usage: bool,
    prompt_tokens: u32,
    output_tokens: u32,
    body: Bytes,
}

fn prepare(
    state: &GatewayState,
    table: &Table,
    key: KeyIndex,
    headers: &HeaderMap,
    body: Bytes,
    api: Api,
) -> Result<Prepared, ApiError> {
    let config = &table.config;
    let class = match headers.get(SLA_HEADER) {
        Some(v) => {
            let name = String::from_utf8_lossy(v.as_bytes());
            let name = name.trim();
            config
                .classes
                .iter()
                .position(|c| c.name == name)
                .ok_or_else(|| {
                    let known: Vec<&str> = config.classes.iter().map(|c| c.name.as_str()).collect();
                    ApiError::invalid(format!(
                        "{SLA_HEADER}: unknown SLA class `{}`; known: {}",
                        crate::openai_error::echo(name),
                        known.join(", ")
                    ))
                })?
        }
        None => key
            .0
            .and_then(|i| table.keys[i].config.class)
            .unwrap_or(config.default_class),
    };
    let peek: Peek = serde_json::from_slice(&body)
        .map_err(|e| ApiError::invalid(format!("The body is not a valid JSON request: {e}")))?;
    let model = peek
        .model
        .ok_or_else(|| ApiError::invalid_param("model", "`model` is required"))?;
    if !table.pools.iter().any(|p| p.config.models.contains(&model)) {
        let mut all: Vec<&str> = Vec::new();
        for model in table.pools.iter().flat_map(|p| &p.config.models) {
            if !all.contains(&model.as_str()) {
                all.push(model);
            }
        }
        return Err(ApiError::model_not_found(&model, &all.join(", ")));
    }
    let client_usage = peek
        .stream_options
        .as_ref()
        .is_some_and(|o| o.include_usage);
    let default_out = if api == Api::Completions {
        16
    } else {
        config.classes[class].default_output_tokens
    };
    let output_tokens = peek
        .max_completion_tokens
        .or(peek.max_tokens)
        .unwrap_or(default_out)
        .max(1);
    let prompt_tokens = peek.prompt.tokens_or_estimate(body.len());
    let body = if peek.stream && !client_usage {
        // Ask the upstream for usage so the ledger gets real token counts; the relay drops that event.
        match (&peek.stream_options, with_usage_option(&body)) {
            (None, Some(b)) => b,
            _ => {
                let mut v: Value = serde_json::from_slice(&body)
                    .map_err(|e| ApiError::invalid(format!("The body is not valid JSON: {e}")))?;
                v["stream_options"] = json!({"include_usage": true});
                Bytes::from(serde_json::to_vec(&v).map_err(|e| ApiError::internal(e.to_string()))?)
            }
        }
    } else {
        body
    };
    let id = headers
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty() && s.len() <= 128)
        .map_or_else(|| state.next_id(), str::to_owned);
    Ok(Prepared {
        id,
        class,
        model,
        stream: peek.stream,
        client_usage,
        prompt_tokens,
        output_tokens,
        body,
    })
}

/// `body` (a non-empty JSON object without `stream_options`) with `"stream_options":{"include_usage":true}`
/// spliced in after its opening brace, without re-serializing it; `None` when it does not start that way.
fn with_usage_option(body: &[u8]) -> Option<Bytes> {
    const FIELD: &[u8] = br#""stream_options":{"include_usage":true},"#;
    let open = body.iter().position(|b| !b.is_ascii_whitespace())?;
    if body[open] != b'{' {
        return None;
    }
    let next = body[open + 1..].iter().find(|b| !b.is_ascii_whitespace())?;
    if *next == b'}' {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() + FIELD.len());
    out.extend_from_slice(&body[..=open]);
    out.extend_from_slice(FIELD);
    out.extend_from_slice(&body[open + 1..]);
    Some(Bytes::from(out))
}

/// A routing outcome: where to send and why.
struct Choice {
    pool: usize,
    endpoint: Option<Arc<Endpoint>>,
    decision: RouteDecision,
}

fn reason_code(r: &Reason) -> &'static str {
    match r {
        Reason::PlanGpuShare { .. } => "plan_gpu_share",
        Reason::CpuMeetsSla => "cpu_meets_sla",
        Reason::CpuPredictedMiss { .. } => "cpu_predicted_miss",
        Reason::CpuEwmaOverSla => "cpu_ewma_over_sla",
        Reason::NoCpu => "no_cpu",
        Reason::NoGpu => "no_gpu",
        Reason::GpuShareCapped { .. } => "gpu_share_capped",
        Reason::SlaRelaxed { .. } => "sla_relaxed",
        Reason::PlanShed { .. } => "plan_shed",
        Reason::BudgetReject { .. } => "budget_reject",
    }
}

fn reason_codes(d: &RouteDecision) -> String {
    let mut s = String::new();
    for r in d.reasons.iter() {
        if !s.is_empty() {
            s.push(',');
        }
        s.push_str(reason_code(r));
    }
    s
}

/// Routes `req` over the pools serving `model`, leaving out endpoints in `tried`.
fn decide(
    state: &GatewayState,
    table: &Table,
    req: &Prepared,
    tried: &[usize],
) -> Result<Choice, ApiError> {
    let now = Instant::now();
    let config = &table.config;
    let class = &config.classes[req.class];
    let n = table.pools.len();
    let mut loads: Vec<Vec<InstanceLoad>> = Vec::with_capacity(n);
    let mut members: Vec<Vec<&Arc<Endpoint>>> = Vec::with_capacity(n);
    let mut ewma = Vec::with_capacity(n);
    for p in &table.pools {
        let usable = !p.drained.load(Ordering::Relaxed) && p.config.models.contains(&req.model);
        let eps: Vec<&Arc<Endpoint>> = p
            .endpoints
            .iter()
            .filter(|e| usable && !tried.contains(&e.id) && e.health.available(now))
            .collect();
        let max = p.config.max_concurrency;
        loads.push(
            eps.iter()
                .map(|e| {
                    let k = e.health.in_flight.load(Ordering::Relaxed);
                    InstanceLoad {
                        in_flight: k,
                        queue_depth: k.saturating_sub(max),
                    }
                })
                .collect(),
        );
        let (mut ttft, mut tpot) = (0.0, 0.0);
        for e in &eps {
            let (a, b) = e.health.latency(now);
            ttft += a;
            tpot += b;
        }
        let k = eps.len().max(1) as f64;
        let (ttft, tpot) = (ttft / k, tpot / k);
        let e2e = if ttft > 0.0 || tpot > 0.0 {
            ttft + tpot * f64::from(req.output_tokens.saturating_sub(1))
        } else {
            0.0
        };
        ewma.push((ttft, e2e));
        members.push(eps);
    }
    let pools: Vec<PoolState<'_>> = table
        .pools
        .iter()
        .enumerate()
        .map(|(i, p)| PoolState {
            kind: p.config.kind,
            healthy: !members[i].is_empty(),
            instances: &loads[i],
            ewma_ttft_s: ewma[i].0,
            ewma_e2e_s: ewma[i].1,
            service: p.config.service.as_ref(),
            gpu_ttft_s: p.config.gpu_ttft.as_secs_f64(),
            gpu_tpot_s: p.config.gpu_tpot.as_secs_f64(),
        })
        .collect();
    let (day, month, gpu_share_today) = state.accounting.spent(Utc::now());
    let fraction = [
        config.budget_per_day.map(|b| day / b),
        config.budget_per_month.map(|b| month / b),
    ]
    .into_iter()
    .flatten()
    .fold(None, |m: Option<f64>, f| Some(m.map_or(f, |m| m.max(f))));
    // The planner's budget state is per day; the larger of the day's and the month's spent fractions
    // stands in for it, against a budget of 1.
    let budget = match fraction {
        Some(f) => BudgetState {
            spent_today: f,
            budget_per_day: Some(1.0),
            gpu_share_today,
        },
        None => BudgetState {
            gpu_share_today,
            ..BudgetState::default()
        },
    };
    let plan = state.plan.read().unwrap_or_else(|p| p.into_inner()).clone();
    let policy = RoutePolicy {
        gpu_share: &plan.gpu,
        shed_share: &plan.shed,
        overflow_to_gpu: true,
        budget: &config.budget_rules,
    };
    let r1 = state.draw();
    let request = RouteRequest {
        class: req.class,
        priority: class.priority,
        prompt_tokens: req.prompt_tokens,
        expected_output_tokens: req.output_tokens,
        sla: class.sla,
        draw: (r1 >> 11) as f64 / (1u64 << 53) as f64,
        pick: [(r1 & 0xffff) as usize, ((r1 >> 16) & 0xffff) as usize],
    };
    let decision = route(&request, &pools, &budget, &policy);
    match decision.target {
        Target::Reject => {
            let codes = reason_codes(&decision);
            let text: Vec<String> = decision.reasons.iter().map(ToString::to_string).collect();
            if decision
                .reasons
                .iter()
                .any(|r| matches!(r, Reason::BudgetReject { .. } | Reason::PlanShed { .. }))
            {
                let mut e = ApiError::overloaded(format!(
                    "Rejected by the budget policy: {}",
                    text.join("; ")
                ));
                e.code = Some("budget_exceeded");
                let _ = codes;
                Err(e)
            } else {
                Err(ApiError::unavailable(format!(
                    "No healthy upstream: {}",
                    text.join("; ")
                )))
            }
        }
        Target::Cpu { pool, instance } => Ok(Choice {
            pool,
            endpoint: members[pool].get(instance).map(|e| (*e).clone()),
            decision,
        }),
        Target::Gpu { pool } => {
            let eps = &members[pool];
            let endpoint = if eps.is_empty() {
                None
            } else {
                let r = state.draw() as usize;
                let (a, b) = (eps[r % eps.len()], eps[(r >> 20) % eps.len()]);
                let load = |e: &Endpoint| e.health.in_flight.load(Ordering::Relaxed);
                Some(if load(b) < load(a) {
                    b.clone()
                } else {
                    a.clone()
                })
            };
            Ok(Choice {
                pool,
                endpoint,
                decision,
            })
        }
    }
}

/// Counts a request in flight on an endpoint while it lives.
struct InFlight(Arc<Endpoint>);

impl InFlight {
    fn new(e: Arc<Endpoint>) -> Self {
        e.health.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(e)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.health.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn chat(
    State(state): State<Arc<GatewayState>>,
    axum::Extension(key): axum::Extension<KeyIndex>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    proxy(state, key, headers, body, Api::Chat).await
}

async fn completions(
    State(state): State<Arc<GatewayState>>,
    axum::Extension(key): axum::Extension<KeyIndex>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    proxy(state, key, headers, body, Api::Completions).await
}

async fn read_body(table: &Table, body: Body) -> Result<Bytes, ApiError> {
    let limit = table.config.max_body_bytes;
    to_bytes(body, limit)
        .await
        .map_err(|e| ApiError::unreadable_body(e, limit))
}

async fn dry_run(
    State(state): State<Arc<GatewayState>>,
    axum::Extension(key): axum::Extension<KeyIndex>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let table = state.table();
    let bytes = read_body(&table, body).await?;
    let api = if serde_json::from_slice::<Value>(&bytes)
        .ok()
        .is_some_and(|v| v.get("prompt").is_some())
    {
        Api::Completions
    } else {
        Api::Chat
    };
    let req = prepare(&state, &table, key, &headers, bytes, api)?;
    let class = &table.config.classes[req.class];
    let choice = match decide(&state, &table, &req, &[]) {
        Ok(c) => c,
        Err(e) => {
            return Ok(Json(json!({
                "target": "reject",
                "class": class.name,
                "status": e.status.as_u16(),
                "message": e.message,
            })));
        }
    };
    let p = &table.pools[choice.pool];
    let target = match p.config.kind {
        PoolKind::Cpu => "cpu",
        PoolKind::Gpu => "gpu",
    };
    let pool = &p.config.name;
    let endpoint = choice.endpoint.as_ref().map(|e| e.config.name.clone());
    let decision = choice.decision;
    let reasons: Vec<Value> = decision
        .reasons
        .iter()
        .map(|r| json!({"code": reason_code(r), "text": r.to_string()}))
        .collect();
    Ok(Json(json!({
        "target": target,
        "pool": pool,
        "endpoint": endpoint,
        "class": class.name,
        "reasons": reasons,
        "predicted_ttft_ms": decision.predicted_ttft_s * 1e3,
        "predicted_e2e_ms": decision.predicted_e2e_s * 1e3,
        "prompt_tokens_estimate": req.prompt_tokens,
        "output_tokens_planned": req.output_tokens,
    })))
}

/// What the accounting of one answered request needs.
struct Done {
    id: String,
    class: usize,
    pool: usize,
    endpoint: Arc<Endpoint>,
    reason: String,
    predicted_e2e_s: f64,
    arrived: Instant,
    prompt_estimate: u32,
}

/// What a finished request showed.
struct Seen {
    outcome: &'static str,
    usage: Option<(u64, u64)>,
    output_estimate: u64,
    ttft: Option<Duration>,
    e2e: Duration,
}

fn account(state: &GatewayState, table: &Table, done: &Done, seen: Seen) {
    let Seen {
        outcome,
        usage,
        output_estimate,
        ttft,
        e2e,
    } = seen;
    let pool = &table.pools[done.pool];
    let class = &table.config.classes[done.class];
    let m = &state.metrics;
    m.requests
        .with_label_values(&[pool.config.name.as_str(), class.name.as_str(), outcome])
        .inc();
    let (prompt, output) = usage.unwrap_or((u64::from(done.prompt_estimate), output_estimate));
    if outcome == "ok" {
        let now = Instant::now();
        if let Some(t) = ttft {
            m.ttft
                .with_label_values(&[pool.config.name.as_str()])
                .observe(t.as_secs_f64());
        }
        m.e2e
            .with_label_values(&[pool.config.name.as_str()])
            .observe(e2e.as_secs_f64());
        let met = class
            .sla
            .met_by(ttft.unwrap_or(e2e).as_secs_f64(), e2e.as_secs_f64());
        m.sla
            .with_label_values(&[class.name.as_str(), if met { "true" } else { "false" }])
            .inc();
        // Streams give TTFT and per-token time; a JSON answer gives only its total, which feeds the
        // per-token figure.
        let tpot = match ttft {
            Some(t) if output > 1 => Some(e2e.saturating_sub(t) / (output as u32 - 1).max(1)),
            Some(_) => None,
            None => Some(e2e / (output.max(1) as u32)),
        };
        match ttft {
            Some(t) => done.endpoint.health.observe(t, tpot, now),
            None => {
                if let Some(tp) = tpot {
                    done.endpoint.health.observe_tpot(tp, now);
                }
            }
        }
        done.endpoint
            .health
            .completed
            .fetch_add(1, Ordering::Relaxed);
    }
    let cost = pool.config.price.cost(prompt + output);
    state.accounting.push(Record {
        decision: NewGatewayDecision {
            decided_at: Utc::now(),
            request_id: done.id.clone(),
            sla_class: class.name.clone(),
            pool: pool.config.name.clone(),
            endpoint: done.endpoint.config.name.clone(),
            reason: done.reason.clone(),
            predicted_latency_ms: Some(done.predicted_e2e_s * 1e3),
            observed_latency_ms: Some(e2e.as_secs_f64() * 1e3),
            prompt_tokens: prompt as i64,
            output_tokens: output as i64,
            cost_usd: cost,
            source: LIVE_TRAFFIC.to_owned(),
        },
    });
}

fn route_header(pool: &Pool, endpoint: &Endpoint, reason: &str, attempt: u32) -> HeaderValue {
    let text = format!(
        "pool={}; endpoint={}; reason={}; attempt={}",
        pool.config.name,
        endpoint.config.name,
        if reason.is_empty() { "none" } else { reason },
        attempt + 1
    );
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("unprintable"))
}

async fn proxy(
    state: Arc<GatewayState>,
    key: KeyIndex,
    headers: HeaderMap,
    body: Body,
    api: Api,
) -> Response {
    let arrived = Instant::now();
    let Ok(permit) = state.slots.clone().try_acquire_owned() else {
        return ApiError::overloaded("The gateway is at capacity").into_response();
    };
    let table = state.table();
    let bytes = match read_body(&table, body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let req = match prepare(&state, &table, key, &headers, bytes, api) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let config = table.config.clone();
    let mut tried: Vec<usize> = Vec::new();
    let mut first_kind: Option<PoolKind> = None;
    let mut last_error: Option<UpstreamError> = None;
    let mut counted = false;
    for attempt in 0..config.retry_attempts {
        let choice = match decide(&state, &table, &req, &tried) {
            Ok(c) => c,
            Err(e) => {
                let class = &config.classes[req.class].name;
                let outcome = if e.status == StatusCode::TOO_MANY_REQUESTS {
                    "rejected"
                } else {
                    "no_upstream"
                };
                if last_error.is_none() {
                    state
                        .metrics
                        .requests
                        .with_label_values(&["none", class, outcome])
                        .inc();
                    return with_id(e.into_response(), &req.id);
                }
                break;
            }
        };
        let pool = &table.pools[choice.pool];
        let Some(endpoint) = choice.endpoint.clone() else {
            break;
        };
        if attempt > 0 {
            state.metrics.retries.inc();
            let backoff = config.retry_backoff * 2u32.saturating_pow(attempt - 1);
            tokio::time::sleep(backoff).await;
        }
        match first_kind {
            None => first_kind = Some(pool.config.kind),
            Some(PoolKind::Cpu) if pool.config.kind == PoolKind::Gpu => {
                state.metrics.failovers.inc()
            }
            _ => {}
        }
        if !counted {
            state
                .accounting
                .count_request(pool.config.kind == PoolKind::Gpu, Utc::now());
            counted = true;
        }
        tried.push(endpoint.id);
        if !endpoint.health.try_acquire(Instant::now()) {
            continue;
        }
        let reason = reason_codes(&choice.decision);
        let in_flight = InFlight::new(endpoint.clone());
        let sent = upstream::send(
            &pool.client,
            &endpoint.config,
            api.path(),
            req.body.clone(),
            pool.config.first_byte_timeout,
        )
        .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) => {
                endpoint.health.on_failure(Instant::now());
                tracing::debug!(request = %req.id, error = %e, "attempt failed before the first byte");
                last_error = Some(e);
                continue;
            }
        };
        let done = Done {
            id: req.id.clone(),
            class: req.class,
            pool: choice.pool,
            endpoint: endpoint.clone(),
            reason: reason.clone(),
            predicted_e2e_s: choice.decision.predicted_e2e_s,
            arrived,
            prompt_estimate: req.prompt_tokens,
        };
        let status = response.status();
        let route_value = route_header(pool, &endpoint, &reason, attempt);
        let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
        if req.stream && status.is_success() {
            use futures_util::StreamExt;
            let mut stream = response.bytes_stream();
            let first = match tokio::time::timeout(pool.config.idle_timeout, stream.next()).await {
                Ok(Some(Ok(b))) => b,
                _ => {
                    endpoint.health.on_failure(Instant::now());
                    last_error = Some(UpstreamError {
                        source: ErrorSource::Upstream,
                        retryable: true,
                        status: Some(status),
                        message: format!(
                            "{}: stream ended before its first byte",
                            endpoint.config.name
                        ),
                    });
                    continue;
                }
            };
            endpoint.health.on_success();
            let ttft = arrived.elapsed();
            let st = state.clone();
            let tb = table.clone();
            let on_end = move |s: StreamSummary| {
                let _keep = (in_flight, permit);
                let e2e = s.last_at.saturating_duration_since(done.arrived);
                let outcome = match s.end {
                    StreamEnd::Complete => "ok",
                    StreamEnd::UpstreamFailed => {
                        done.endpoint.health.on_failure(Instant::now());
                        "stream_error"
                    }
                    StreamEnd::ClientGone => "client_gone",
                };
                let seen = Seen {
                    outcome,
                    usage: s.usage,
                    output_estimate: s.events.saturating_sub(1),
                    ttft: Some(ttft),
                    e2e,
                };
                account(&st, &tb, &done, seen);
            };
            let relay = Relay::new(
                first,
                stream,
                pool.config.idle_timeout,
                !req.client_usage,
                on_end,
            );
            let mut out = Response::new(Body::from_stream(relay));
            *out.status_mut() = status;
            let h = out.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                content_type.unwrap_or_else(|| HeaderValue::from_static("text/event-stream")),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            h.insert(HeaderName::from_static(ROUTE_HEADER), route_value);
            return with_id(out, &req.id);
        }
        let limit = config.max_body_bytes.max(16 << 20);
        let body = match upstream::read_all(
            response,
            pool.config.idle_timeout,
            limit,
            &endpoint.config.name,
        )
        .await
        {
            Ok(b) => b,
            Err(e) => {
                endpoint.health.on_failure(Instant::now());
                if !e.retryable {
                    last_error = Some(e);
                    break;
                }
                last_error = Some(e);
                continue;
            }
        };
        endpoint.health.on_success();
        drop(in_flight);
        let e2e = arrived.elapsed();
        let usage = if status.is_success() {
            serde_json::from_slice::<Value>(&body)
                .ok()
                .as_ref()
                .and_then(upstream::usage_of)
        } else {
            None
        };
        let outcome = if status.is_success() {
            "ok"
        } else {
            "upstream_4xx"
        };
        let estimate = if status.is_success() {
            u64::from(req.output_tokens)
        } else {
            0
        };
        let seen = Seen {
            outcome,
            usage,
            output_estimate: estimate,
            ttft: None,
            e2e,
        };
        account(&state, &table, &done, seen);
        let mut out = Response::new(Body::from(body));
        *out.status_mut() = status;
        let h = out.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            content_type.unwrap_or_else(|| HeaderValue::from_static("application/json")),
        );
        h.insert(HeaderName::from_static(ROUTE_HEADER), route_value);
        drop(permit);
        return with_id(out, &req.id);
    }
    let class = &config.classes[req.class].name;
    state
        .metrics
        .requests
        .with_label_values(&["none", class, "upstream_error"])
        .inc();
    let message = match &last_error {
        Some(e) => format!("Every upstream attempt failed; last: {}", e.message),
        None => "No upstream endpoint could take the request".to_owned(),
    };
    let mut e = ApiError {
        status: StatusCode::BAD_GATEWAY,
        kind: "server_error",
        ..ApiError::invalid(message)
    };
    e.code = Some("upstream_error");
    with_id(e.into_response(), &req.id)
}

fn with_id(mut response: Response, id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(id) {
        response
            .headers_mut()
            .insert(HeaderName::from_static(REQUEST_ID_HEADER), v);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usage_option_is_spliced_into_the_object() {
        let b = with_usage_option(br#" {"model":"m","stream":true}"#).expect("an object");
        let v: Value = serde_json::from_slice(&b).expect("still JSON");
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["model"], "m");
        assert!(with_usage_option(b"{ }").is_none());
        assert!(with_usage_option(b"[1]").is_none());
    }
}
