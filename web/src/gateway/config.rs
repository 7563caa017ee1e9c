//! The gateway's TOML configuration: read once into the protocol's serde structs ([`GatewayConfigFile`]),
//! then validated into [`GatewayConfig`], whose errors name the key at fault (`pool[1].endpoint[0].url: ...`).
//!
//! Secrets never sit in the file: upstream and client keys are named by environment variable
//! (`api_key_env`, `key_env`) and read through a [`Source`], so tests pass a map instead of the process
//! environment.

use std::{collections::HashMap, fmt, net::SocketAddr, time::Duration};

use strata_controller::planning::ProfileSelector;
pub use strata_controller::protocol::{
    ApiKeyFile, BreakerFile, BudgetFile, ClassFile, EndpointFile, GatewayConfigFile, HealthFile,
    ListenerFile, PoolFile, RetryFile, StoreFile,
};

use super::accounting::Sink;
use crate::listener::{ListenerLimits, MAX_CONNECTIONS};
use strata_planner::{
    route::{BudgetRules, PoolKind},
    service::ServiceCurve,
    workload::{BudgetAction, LengthDist, RequestClass, Sla},
};

/// Where environment values come from (the process environment, or a map in tests).
pub trait Source {
    /// The value of `key`, if set.
    fn get(&self, key: &str) -> Option<String>;
}

/// The process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Env;

impl Source for Env {
    fn get(&self, key: &str) -> Option<String> {
        std::env::var(key).ok()
    }
}

impl Source for HashMap<String, String> {
    fn get(&self, key: &str) -> Option<String> {
        HashMap::get(self, key).cloned()
    }
}

/// A configuration error: the key at fault and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct ConfigError {
    /// The dotted key, e.g. `pool[0].endpoint[1].url`.
    pub key: String,
    /// What is wrong.
    pub problem: String,
}

fn err(key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.into(),
        problem: problem.into(),
    }
}

/// One validated endpoint.
#[derive(Clone)]
pub struct EndpointConfig {
    /// Name.
    pub name: String,
    /// Base URL without a trailing slash.
    pub url: String,
    /// Bearer key for the upstream (never logged: `Debug` hides it).
    pub api_key: Option<String>,
}

impl fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

/// How a pool is priced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Price {
    /// USD per million tokens (prompt + output).
    PerMillionTokens(f64),
    /// USD per endpoint-hour, charged per token at `tokens_per_s` (the endpoint's measured throughput):
    /// a request costs `tokens / (tokens_per_s x 3600) x price`.
    PerHour {
        /// USD per hour.
        usd: f64,
        /// Measured tokens/s of one endpoint.
        tokens_per_s: f64,
    },
}

impl Price {
    /// USD for `tokens`.
    pub fn cost(&self, tokens: u64) -> f64 {
        let t = tokens as f64;
        match *self {
            Price::PerMillionTokens(p) => t * p / 1e6,
            Price::PerHour { usd, tokens_per_s } => t / (tokens_per_s * 3600.0) * usd,
        }
    }
}

/// One validated pool.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Name.
    pub name: String,
    /// CPU or GPU.
    pub kind: PoolKind,
    /// Endpoints, at least one.
    pub endpoints: Vec<EndpointConfig>,
    /// Served models.
    pub models: Vec<String>,
    /// In-flight requests per endpoint at most.
    pub max_concurrency: u32,
    /// Price.
    pub price: Price,
    /// CPU: service model of one endpoint (from the file, or from the store once resolved).
    pub service: Option<ServiceCurve>,
    /// CPU: the stored profile the service model comes from, when the file names one.
    pub profile: Option<ProfileSelector>,
    /// GPU: p99 TTFT.
    pub gpu_ttft: Duration,
    /// GPU: p99 TPOT.
    pub gpu_tpot: Duration,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Time to the response head.
    pub first_byte_timeout: Duration,
    /// Longest silence between body chunks.
    pub idle_timeout: Duration,
}

/// One validated SLA class.
#[derive(Debug, Clone)]
pub struct ClassConfig {
    /// Name.
    pub name: String,
    /// Targets.
    pub sla: Sla,
    /// Priority.
    pub priority: u32,
    /// Output tokens planned for without `max_tokens`.
    pub default_output_tokens: u32,
}

/// One validated client key.
#[derive(Clone)]
pub struct ApiKeyConfig {
    /// Name.
    pub name: String,
    /// The key.
    pub key: String,
    /// Index of its default class.
    pub class: Option<usize>,
    /// Requests/s and burst.
    pub rate: Option<(f64, f64)>,
}

impl fmt::Debug for ApiKeyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKeyConfig")
            .field("name", &self.name)
            .field("class", &self.class)
            .field("rate", &self.rate)
            .finish_non_exhaustive()
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// Index of the default class.
    pub default_class: usize,
    /// Admin bearer token (admin routes are off without one).
    pub admin_token: Option<String>,
    /// Largest body.
    pub max_body_bytes: usize,
    /// Timeouts, connection cap and largest header block of the gateway's listener.
    pub listener: ListenerLimits,
    /// Requests at once.
    pub max_concurrency: usize,
    /// Attempts in all.
    pub retry_attempts: u32,
    /// First backoff.
    pub retry_backoff: Duration,
    /// Failures that open a breaker.
    pub breaker_failures: u32,
    /// Open time before a probe.
    pub breaker_open: Duration,
    /// Health-check interval (zero: off).
    pub health_interval: Duration,
    /// Health-check path.
    pub health_path: String,
    /// Health-check timeout.
    pub health_timeout: Duration,
    /// Store settings.
    pub store: StoreFile,
    /// Pools.
    pub pools: Vec<PoolConfig>,
    /// Classes.
    pub classes: Vec<ClassConfig>,
    /// Client keys.
    pub api_keys: Vec<ApiKeyConfig>,
    /// USD per day.
    pub budget_per_day: Option<f64>,
    /// USD per month.
    pub budget_per_month: Option<f64>,
    /// Budget actions, class names resolved.
    pub budget_rules: BudgetRules,
}

impl GatewayConfig {
    /// Whether some CPU pool reads its service model from a stored profile.
    pub fn has_stored_profiles(&self) -> bool {
        self.pools.iter().any(|p| p.profile.is_some())
    }

    /// Reads the service model of every pool that names a stored profile from `sink` (the store).
    ///
    /// # Errors
    /// A [`ConfigError`] on `pool[i].profile` when there is no store, the profile is not found, or its
    /// curve is not usable.
    pub async fn resolve_stored_profiles(
        &mut self,
        sink: Option<&dyn Sink>,
    ) -> Result<(), ConfigError> {
        for (i, pool) in self.pools.iter_mut().enumerate() {
            let Some(selector) = &pool.profile else {
                continue;
            };
            let key = format!("pool[{i}].profile");
            let sink = sink.ok_or_else(|| {
                err(
                    &key,
                    "a stored profile needs the store: give the pool a service model instead to run \
                     without one",
                )
            })?;
            let service = sink
                .service_curve(selector)
                .await
                .map_err(|problem| err(&key, problem))?;
            check_service(&format!("pool[{i}]"), &service)
                .map_err(|e| err(&key, format!("the stored curve is unusable: {}", e.problem)))?;
            pool.service = Some(service);
        }
        Ok(())
    }

    /// Parses and validates TOML `text`, reading secrets from `env`.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key at fault.
    pub fn from_toml(text: &str, env: &dyn Source) -> Result<Self, ConfigError> {
        let line = |e: &toml::de::Error| {
            e.span()
                .and_then(|s| text.get(..s.start))
                .map(|before| before.lines().count().max(1))
        };
        let deserializer = toml::Deserializer::parse(text).map_err(|e| {
            let key = line(&e).map_or_else(|| "(file)".to_owned(), |n| format!("line {n}"));
            err(key, e.message().to_owned())
        })?;
        let file: GatewayConfigFile =
            serde_path_to_error::deserialize(deserializer).map_err(|e| {
                let path = e.path().to_string();
                let e = e.into_inner();
                let key = match (path.as_str(), line(&e)) {
                    (".", Some(n)) => format!("line {n}"),
                    (".", None) => "(file)".to_owned(),
                    (path, Some(n)) => format!("{path} (line {n})"),
                    (path, None) => path.to_owned(),
                };
                err(key, e.message().to_owned())
            })?;
        Self::from_file(file, env)
    }
}

/// The listener's limits from `[listener]`, with `max_header_bytes` from the top of the file.
fn listener_limits(
    file: &ListenerFile,
    max_header_bytes: usize,
) -> Result<ListenerLimits, ConfigError> {
    let ms = |key: &str, v: u64| {
        if v == 0 {
            Err(err(format!("listener.{key}"), "must be at least 1 ms"))
        } else {
            Ok(Duration::from_millis(v))
        }
    };
    if !(1..=MAX_CONNECTIONS).contains(&file.max_connections) {
        return Err(err(
            "listener.max_connections",
            format!("must be in 1..={MAX_CONNECTIONS}"),
        ));
    }
    if max_header_bytes == 0 {
        return Err(err("max_header_bytes", "must be at least 1"));
    }
    Ok(ListenerLimits {
        header_timeout: ms("header_timeout_ms", file.header_timeout_ms)?,
        body_timeout: ms("body_timeout_ms", file.body_timeout_ms)?,
        idle_timeout: ms("idle_timeout_ms", file.idle_timeout_ms)?,
        max_connections: file.max_connections,
        max_header_bytes,
    })
}

/// The `host[:port]` of an endpoint's base URL as written, once a URL parser has read it: `http://`
/// (this build has no TLS), a host, and a port in range when one is given.
fn endpoint_authority<'a>(key: &str, url: &'a str) -> Result<&'a str, ConfigError> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| err(key.to_owned(), format!("`{url}` is not a URL: {e}")))?;
    if parsed.scheme() != "http" {
        return Err(err(
            key.to_owned(),
            format!("`{url}` must use http:// (this build has no TLS)"),
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(err(key.to_owned(), format!("`{url}` has no host")));
    }
    let rest = url.get("http://".len()..).unwrap_or_default();
    Ok(rest.split('/').next().unwrap_or_default())
}

/// A CPU service model the router can use: `slots >= 1`, a positive prefill rate and copy count, TPOT
/// points with increasing positive batch sizes, and a drain hold of at least 0.
fn check_service(key: &str, s: &ServiceCurve) -> Result<(), ConfigError> {
    let bad = s.slots == 0
        || !is_positive(s.prefill_tokens_per_s)
        || s.tpot_by_batch.is_empty()
        || s.tpot_by_batch.iter().any(|&(b, t)| !(b > 0.0 && t >= 0.0))
        || s.tpot_by_batch.windows(2).any(|w| w[1].0 <= w[0].0)
        || !is_positive(s.copies);
    if bad {
        return Err(err(
            format!("{key}.service"),
            "slots >= 1, prefill_tokens_per_s > 0, copies > 0, and tpot_by_batch non-empty with batch \
             sizes > 0 in increasing order",
        ));
    }
    if !(s.drain_hold.is_finite() && s.drain_hold >= 0.0) {
        return Err(err(
            format!("{key}.service.drain_hold"),
            format!("must be a number of at least 0, got {}", s.drain_hold),
        ));
    }
    Ok(())
}

fn is_positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

fn positive(key: &str, v: Option<f64>) -> Result<Option<f64>, ConfigError> {
    match v {
        Some(x) if !(x.is_finite() && x > 0.0) => Err(err(key, format!("must be > 0, got {x}"))),
        v => Ok(v),
    }
}

impl GatewayConfig {
    /// Validates the file as written: checks every key and resolves names and secrets.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key at fault.
    pub fn from_file(
        file: GatewayConfigFile,
        env: &dyn Source,
    ) -> Result<GatewayConfig, ConfigError> {
        let listen: SocketAddr = file.listen.parse().map_err(|e| {
            err(
                "listen",
                format!("`{}` is not host:port ({e})", file.listen),
            )
        })?;
        if file.classes.is_empty() {
            return Err(err("class", "at least one [[class]] is needed"));
        }
        let mut classes = Vec::new();
        for (i, c) in file.classes.iter().enumerate() {
            let key = format!("class[{i}]");
            if c.name.is_empty() {
                return Err(err(format!("{key}.name"), "must not be empty"));
            }
            if classes.iter().any(|x: &ClassConfig| x.name == c.name) {
                return Err(err(
                    format!("{key}.name"),
                    format!("duplicate class `{}`", c.name),
                ));
            }
            let ttft = positive(&format!("{key}.ttft_p99_ms"), c.ttft_p99_ms)?;
            let e2e = positive(&format!("{key}.e2e_p99_ms"), c.e2e_p99_ms)?;
            classes.push(ClassConfig {
                name: c.name.clone(),
                sla: Sla {
                    ttft_p99_s: ttft.map(|v| v / 1e3),
                    e2e_p99_s: e2e.map(|v| v / 1e3),
                },
                priority: c.priority,
                default_output_tokens: c.default_output_tokens.max(1),
            });
        }
        let class_index = |key: &str, name: &str| {
            classes
                .iter()
                .position(|c| c.name == name)
                .ok_or_else(|| err(key, format!("unknown class `{name}`")))
        };
        let default_class = class_index("default_class", &file.default_class)?;
        let admin_token = match &file.admin_token_env {
            Some(var) => Some(env.get(var).filter(|t| t.len() >= 16).ok_or_else(|| {
                err(
                    "admin_token_env",
                    format!("environment variable {var} must hold a token of 16+ characters"),
                )
            })?),
            None => None,
        };
        if file.pools.is_empty() {
            return Err(err("pool", "at least one [[pool]] is needed"));
        }
        let mut pools: Vec<PoolConfig> = Vec::new();
        let mut endpoint_names: Vec<String> = Vec::new();
        for (i, p) in file.pools.iter().enumerate() {
            let key = format!("pool[{i}]");
            if p.name.is_empty() {
                return Err(err(format!("{key}.name"), "must not be empty"));
            }
            if pools.iter().any(|x| x.name == p.name) {
                return Err(err(
                    format!("{key}.name"),
                    format!("duplicate pool `{}`", p.name),
                ));
            }
            if p.endpoints.is_empty() {
                return Err(err(
                    format!("{key}.endpoint"),
                    "at least one endpoint is needed",
                ));
            }
            if p.models.is_empty() {
                return Err(err(format!("{key}.models"), "at least one model is needed"));
            }
            if p.max_concurrency == 0 {
                return Err(err(format!("{key}.max_concurrency"), "must be at least 1"));
            }
            let per_token = positive(
                &format!("{key}.price_per_million_tokens_usd"),
                p.price_per_million_tokens_usd,
            )?;
            let per_hour = positive(&format!("{key}.price_per_hour_usd"), p.price_per_hour_usd)?;
            let tokens_per_s = positive(&format!("{key}.tokens_per_s"), p.tokens_per_s)?;
            let price = match (per_token, per_hour, tokens_per_s) {
                (Some(t), None, _) => Price::PerMillionTokens(t),
                (None, Some(usd), Some(tokens_per_s)) => Price::PerHour { usd, tokens_per_s },
                (None, Some(_), None) => {
                    return Err(err(
                        format!("{key}.tokens_per_s"),
                        "a per-hour price needs the endpoint's measured tokens_per_s to charge requests",
                    ));
                }
                (Some(_), Some(_), _) => {
                    return Err(err(
                        format!("{key}.price_per_hour_usd"),
                        "give price_per_hour_usd or price_per_million_tokens_usd, not both",
                    ));
                }
                (None, None, _) => {
                    return Err(err(
                        format!("{key}.price_per_hour_usd"),
                        "a price is needed: price_per_hour_usd (with tokens_per_s) or price_per_million_tokens_usd",
                    ));
                }
            };
            match (p.kind, &p.service, &p.profile) {
                (PoolKind::Cpu, None, None) => {
                    return Err(err(
                        format!("{key}.service"),
                        "a CPU pool needs its service model (slots, prefill_tokens_per_s, tpot_by_batch, \
                         copies) or a stored profile (profile = { model, weights, threads, max_batch })",
                    ));
                }
                (PoolKind::Cpu, Some(_), Some(_)) => {
                    return Err(err(
                        format!("{key}.profile"),
                        "give service or profile, not both",
                    ));
                }
                (PoolKind::Cpu, Some(service), None) => check_service(&key, service)?,
                (PoolKind::Gpu, _, Some(_)) => {
                    return Err(err(
                        format!("{key}.profile"),
                        "only CPU pools take a stored profile",
                    ));
                }
                _ => {}
            }
            let ms = |k: &str, v: u64| {
                if v == 0 {
                    Err(err(format!("{key}.{k}"), "must be at least 1 ms"))
                } else {
                    Ok(Duration::from_millis(v))
                }
            };
            let gpu_ms = |k: &str, v: Option<f64>| -> Result<Duration, ConfigError> {
                let v = positive(&format!("{key}.{k}"), v)?;
                match (p.kind, v) {
                    (PoolKind::Gpu, None) => Err(err(
                        format!("{key}.{k}"),
                        "a GPU pool needs its p99 latency",
                    )),
                    (_, v) => Ok(Duration::from_secs_f64(v.unwrap_or(0.0) / 1e3)),
                }
            };
            let mut endpoints = Vec::new();
            for (j, e) in p.endpoints.iter().enumerate() {
                let ekey = format!("{key}.endpoint[{j}]");
                let url = e.url.trim_end_matches('/').to_owned();
                let host_port = endpoint_authority(&format!("{ekey}.url"), &url)?;
                let name = e.name.clone().unwrap_or_else(|| host_port.to_owned());
                if endpoint_names.contains(&name) {
                    return Err(err(
                        format!("{ekey}.name"),
                        format!("duplicate endpoint name `{name}`"),
                    ));
                }
                endpoint_names.push(name.clone());
                let api_key = match &e.api_key_env {
                    Some(var) => Some(env.get(var).ok_or_else(|| {
                        err(
                            format!("{ekey}.api_key_env"),
                            format!("environment variable {var} is not set"),
                        )
                    })?),
                    None => None,
                };
                endpoints.push(EndpointConfig { name, url, api_key });
            }
            pools.push(PoolConfig {
                name: p.name.clone(),
                kind: p.kind,
                endpoints,
                models: p.models.clone(),
                max_concurrency: p.max_concurrency,
                price,
                service: p.service.clone(),
                profile: p.profile.clone(),
                gpu_ttft: gpu_ms("ttft_p99_ms", p.ttft_p99_ms)?,
                gpu_tpot: gpu_ms("tpot_p99_ms", p.tpot_p99_ms)?,
                connect_timeout: ms("connect_timeout_ms", p.connect_timeout_ms)?,
                first_byte_timeout: ms("first_byte_timeout_ms", p.first_byte_timeout_ms)?,
                idle_timeout: ms("idle_timeout_ms", p.idle_timeout_ms)?,
            });
        }
        let mut api_keys: Vec<ApiKeyConfig> = Vec::new();
        for (i, k) in file.api_keys.iter().enumerate() {
            let key = format!("api_key[{i}]");
            let value = env
                .get(&k.key_env)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    err(
                        format!("{key}.key_env"),
                        format!("environment variable {} is not set", k.key_env),
                    )
                })?;
            if api_keys.iter().any(|x| x.key == value) {
                return Err(err(
                    format!("{key}.key_env"),
                    "two api keys hold the same value",
                ));
            }
            let class = match &k.class {
                Some(c) => Some(class_index(&format!("{key}.class"), c)?),
                None => None,
            };
            let rate = positive(&format!("{key}.rate_per_s"), k.rate_per_s)?;
            let burst = positive(&format!("{key}.burst"), k.burst)?;
            api_keys.push(ApiKeyConfig {
                name: k.name.clone(),
                key: value,
                class,
                rate: rate.map(|r| (r, burst.unwrap_or(r.max(1.0)))),
            });
        }
        let per_day = positive("budget.per_day_usd", file.budget.per_day_usd)?;
        let per_month = positive("budget.per_month_usd", file.budget.per_month_usd)?;
        for (i, a) in file.budget.actions.iter().enumerate() {
            let key = format!("budget.action[{i}]");
            let t = a.threshold();
            if !(t.is_finite() && t >= 0.0) {
                return Err(err(
                    format!("{key}.at_spent_fraction"),
                    format!("must be >= 0, got {t}"),
                ));
            }
            if per_day.is_none() && per_month.is_none() {
                return Err(err(
                    key,
                    "budget actions need budget.per_day_usd or budget.per_month_usd",
                ));
            }
            match a {
                BudgetAction::RelaxSla { class, factor, .. } => {
                    class_index(&format!("{key}.class"), class)?;
                    if factor.is_nan() || *factor < 1.0 {
                        return Err(err(
                            format!("{key}.factor"),
                            format!("must be >= 1, got {factor}"),
                        ));
                    }
                }
                BudgetAction::CapGpuShare { max_share, .. } => {
                    if !(0.0..=1.0).contains(max_share) {
                        return Err(err(
                            format!("{key}.max_share"),
                            format!("must be in 0..=1, got {max_share}"),
                        ));
                    }
                }
                BudgetAction::RejectBelowPriority { .. } => {}
            }
        }
        let planner_classes: Vec<RequestClass> = classes
            .iter()
            .map(|c| RequestClass {
                name: c.name.clone(),
                share: 0.0,
                priority: c.priority,
                prompt_tokens: LengthDist::Fixed { tokens: 1.0 },
                output_tokens: LengthDist::Fixed { tokens: 1.0 },
                sla: c.sla,
            })
            .collect();
        let budget_rules = BudgetRules::compile(&file.budget.actions, &planner_classes);
        if file.retry.attempts == 0 {
            return Err(err("retry.attempts", "must be at least 1"));
        }
        if file.breaker.failures == 0 {
            return Err(err("breaker.failures", "must be at least 1"));
        }
        if file.max_body_bytes == 0 {
            return Err(err("max_body_bytes", "must be at least 1"));
        }
        let listener = listener_limits(&file.listener, file.max_header_bytes)?;
        if file.store.batch == 0 || file.store.queue == 0 {
            return Err(err(
                "store.batch",
                "store.batch and store.queue must be at least 1",
            ));
        }
        Ok(GatewayConfig {
            listen,
            default_class,
            admin_token,
            max_body_bytes: file.max_body_bytes,
            listener,
            max_concurrency: file.max_concurrency.max(1),
            retry_attempts: file.retry.attempts,
            retry_backoff: Duration::from_millis(file.retry.backoff_ms),
            breaker_failures: file.breaker.failures,
            breaker_open: Duration::from_millis(file.breaker.open_ms.max(1)),
            health_interval: Duration::from_millis(file.health.interval_ms),
            health_path: file.health.path.clone(),
            health_timeout: Duration::from_millis(file.health.timeout_ms.max(1)),
            store: file.store,
            pools,
            classes,
            api_keys,
            budget_per_day: per_day,
            budget_per_month: per_month,
            budget_rules,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
default_class = "chat"
[[class]]
name = "chat"
ttft_p99_ms = 500
[[pool]]
name = "cpu"
kind = "cpu"
models = ["m"]
price_per_hour_usd = 0.4
tokens_per_s = 100
service = { slots = 4, prefill_tokens_per_s = 1000.0, tpot_by_batch = [[1.0, 0.01], [4.0, 0.02]], copies = 1.0 }
[[pool.endpoint]]
url = "http://127.0.0.1:8000"
"#;

    fn parse(extra: &str) -> Result<GatewayConfig, ConfigError> {
        let env: HashMap<String, String> = [("K".to_owned(), "secret".to_owned())].into();
        GatewayConfig::from_toml(&format!("{BASE}{extra}"), &env)
    }

    #[test]
    fn a_minimal_config_validates() {
        let c = parse("").expect("valid");
        assert_eq!(c.pools[0].endpoints[0].name, "127.0.0.1:8000");
        assert_eq!(c.classes[0].sla.ttft_p99_s, Some(0.5));
        assert!(matches!(c.pools[0].price, Price::PerHour { .. }));
    }

    #[test]
    fn listener_limits_default_and_are_read_and_checked() {
        let c = parse("").expect("valid");
        assert_eq!(c.listener, ListenerLimits::default());
        let c = parse(
            "[listener]\nheader_timeout_ms = 500\nbody_timeout_ms = 700\nidle_timeout_ms = 900\n\
             max_connections = 7\n",
        )
        .expect("valid");
        assert_eq!(c.listener.header_timeout, Duration::from_millis(500));
        assert_eq!(c.listener.body_timeout, Duration::from_millis(700));
        assert_eq!(c.listener.idle_timeout, Duration::from_millis(900));
        assert_eq!(c.listener.max_connections, 7);
        let e = parse("[listener]\nidle_timeout_ms = 0\n").expect_err("zero");
        assert_eq!(e.key, "listener.idle_timeout_ms");
        let e = parse("[listener]\nmax_connections = 0\n").expect_err("zero");
        assert_eq!(e.key, "listener.max_connections");
    }

    #[test]
    fn errors_name_the_key() {
        let e = parse("[[pool]]\nname = \"gpu\"\nkind = \"gpu\"\nmodels = [\"m\"]\nprice_per_million_tokens_usd = 1.0\n[[pool.endpoint]]\nurl = \"https://x\"\n").unwrap_err();
        assert_eq!(e.key, "pool[1].endpoint[0].url");
        let e = parse("[[pool]]\nname = \"gpu\"\nkind = \"gpu\"\nmodels = [\"m\"]\nprice_per_million_tokens_usd = 1.0\n[[pool.endpoint]]\nurl = \"http://x\"\n").unwrap_err();
        assert_eq!(e.key, "pool[1].ttft_p99_ms");
        let e = parse("[[api_key]]\nname = \"a\"\nkey_env = \"MISSING\"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "api_key[0].key_env: environment variable MISSING is not set"
        );
        let e = parse("[budget]\nper_day_usd = 1.0\n[[budget.action]]\naction = \"relax_sla\"\nat_spent_fraction = 0.5\nclass = \"nope\"\nfactor = 2.0\n").unwrap_err();
        assert_eq!(e.key, "budget.action[0].class");
        let e = parse("bogus = 1\n").unwrap_err();
        assert!(e.problem.contains("bogus"), "{e}");
    }

    #[test]
    fn type_errors_name_the_key_path_and_urls_are_parsed() {
        let gpu = "[[pool]]\nname = \"gpu\"\nkind = \"gpu\"\nmodels = [\"m\"]\n\
                   price_per_million_tokens_usd = 1.0\nttft_p99_ms = 100\ntpot_p99_ms = 10\n";
        let e = parse("[retry]\nattempts = \"sixteen\"\n").unwrap_err();
        assert!(e.key.starts_with("retry.attempts (line "), "{e}");
        assert!(e.problem.contains("invalid type"), "{e}");
        let e = parse(&format!(
            "{gpu}max_concurrency = \"sixteen\"\n[[pool.endpoint]]\nurl = \"http://x\"\n"
        ))
        .unwrap_err();
        assert!(e.key.starts_with("pool[1].max_concurrency"), "{e}");
        for (url, says) in [
            ("http://exa mple.com:99999999/", "is not a URL"),
            ("http://x:99999999/", "is not a URL"),
            ("http://", "is not a URL"),
            ("https://x", "must use http://"),
            ("x:80", "must use http://"),
        ] {
            let e = parse(&format!("{gpu}[[pool.endpoint]]\nurl = \"{url}\"\n")).unwrap_err();
            assert_eq!(e.key, "pool[1].endpoint[0].url", "{url}");
            assert!(e.problem.contains(says), "{url}: {e}");
        }
        parse(&format!(
            "{gpu}[[pool.endpoint]]\nurl = \"http://gpu.example:8443/base/\"\n"
        ))
        .expect("a URL with a port and a path");
    }

    #[test]
    fn a_cpu_pool_takes_a_service_model_or_a_stored_profile() {
        let profile = r#"profile = { model = "m", weights = "q8_0", threads = 2, max_batch = 4 }"#;
        let stored = BASE.replace(
            "service = { slots = 4, prefill_tokens_per_s = 1000.0, tpot_by_batch = [[1.0, 0.01], [4.0, 0.02]], copies = 1.0 }",
            profile,
        );
        let env: HashMap<String, String> = HashMap::new();
        let c = GatewayConfig::from_toml(&stored, &env).expect("valid");
        assert!(c.has_stored_profiles());
        assert_eq!(c.pools[0].service, None, "read from the store at start");
        assert_eq!(
            c.pools[0].profile.as_ref().map(|p| p.to_string()),
            Some("m q8_0 t2 b4".to_owned())
        );
        let both = BASE.replace(
            "tokens_per_s = 100\n",
            &format!("tokens_per_s = 100\n{profile}\n"),
        );
        let e = GatewayConfig::from_toml(&both, &env).unwrap_err();
        assert_eq!(e.key, "pool[0].profile");
        let gpu = format!(
            "[[pool]]\nname = \"gpu\"\nkind = \"gpu\"\nmodels = [\"m\"]\nprice_per_million_tokens_usd = 1.0\n\
             ttft_p99_ms = 100\ntpot_p99_ms = 10\n{profile}\n[[pool.endpoint]]\nurl = \"http://x\"\n"
        );
        assert_eq!(parse(&gpu).unwrap_err().key, "pool[1].profile");
        let typo = stored.replace("max_batch = 4", "max_bach = 4");
        let e = GatewayConfig::from_toml(&typo, &env).unwrap_err();
        assert!(e.problem.contains("max_bach"), "{e}");
    }

    /// A CPU pool's engines may hold prompts for a drain; the mirror then orders its steps so.
    #[test]
    fn a_service_model_takes_the_engines_drain_hold() {
        let service = "copies = 1.0 }";
        let env: HashMap<String, String> = HashMap::new();
        let held = BASE.replace(service, "copies = 1.0, drain_hold = 2.0 }");
        let c = GatewayConfig::from_toml(&held, &env).expect("valid");
        assert_eq!(c.pools[0].service.as_ref().map(|s| s.drain_hold), Some(2.0));
        let c = GatewayConfig::from_toml(BASE, &env).expect("valid");
        assert_eq!(c.pools[0].service.as_ref().map(|s| s.drain_hold), Some(0.0));
        let negative = BASE.replace(service, "copies = 1.0, drain_hold = -1.0 }");
        let e = GatewayConfig::from_toml(&negative, &env).unwrap_err();
        assert_eq!(e.key, "pool[0].service.drain_hold", "{e}");
    }

    #[test]
    fn the_example_config_validates() {
        let text = include_str!("../../../examples/gateway.toml");
        let env: HashMap<String, String> = [
            ("STRATA_GATEWAY_ADMIN_TOKEN", "0123456789abcdef"),
            ("GPU_API_KEY", "g"),
            ("WEB_APP_KEY", "w"),
            ("NIGHTLY_KEY", "n"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let c = GatewayConfig::from_toml(text, &env).expect("the example is valid");
        assert_eq!(c.pools.len(), 2);
        assert_eq!(c.budget_rules.cap_gpu.len(), 1);
    }

    #[test]
    fn debug_output_hides_keys() {
        let c = parse("[[api_key]]\nname = \"app\"\nkey_env = \"K\"\n").expect("valid");
        assert!(!format!("{c:?}").contains("secret"));
    }

    #[test]
    fn per_hour_prices_charge_by_throughput_share() {
        let p = Price::PerHour {
            usd: 3.6,
            tokens_per_s: 1000.0,
        };
        assert!((p.cost(1000) - 0.001).abs() < 1e-12);
        assert!((Price::PerMillionTokens(2.0).cost(500_000) - 1.0).abs() < 1e-12);
    }
}
