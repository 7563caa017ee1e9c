//! The routing table a configuration turns into: pools of endpoints with their live health, and the
//! client keys. A reload builds a new table and swaps it in whole.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Instant,
};

use strata_planner::route::PoolKind;

use super::{
    config::{EndpointConfig, GatewayConfig, PoolConfig},
    health::{Breaker, EndpointHealth, Prober},
    keys::KeyState,
    twin::Twin,
    upstream::{self, Target},
};

/// One upstream endpoint and its live state.
#[derive(Debug)]
pub struct Endpoint {
    /// A process-unique id.
    pub id: usize,
    /// Its configuration.
    pub config: EndpointConfig,
    /// Breaker, load and latency.
    pub health: EndpointHealth,
    /// A step-by-step mirror of the endpoint's engine (CPU pools with a service model).
    pub twin: Option<Twin>,
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

impl Pool {
    /// Where a request to `endpoint` of this pool goes, over the pool's connections.
    pub(crate) fn target<'a>(&'a self, endpoint: &'a Endpoint) -> Target<'a> {
        Target {
            client: &self.client,
            endpoint: &endpoint.config,
            first_byte: self.config.first_byte_timeout,
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

impl Table {
    /// A table holding `config` with no pools and no keys yet.
    pub(crate) fn empty(config: GatewayConfig) -> Self {
        Self {
            config: Arc::new(config),
            pools: Vec::new(),
            keys: Vec::new(),
        }
    }

    /// Builds the pools of `config`, keeping the live state of endpoints that `old` already had (same
    /// name and URL); new endpoints take their ids from `ids`.
    ///
    /// # Errors
    /// When a pool's HTTP client cannot be built.
    pub(crate) fn build(
        config: GatewayConfig,
        old: Option<&Table>,
        ids: &AtomicUsize,
    ) -> Result<Self, reqwest::Error> {
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
                    old.and_then(|t| t.endpoint_like(e)).unwrap_or_else(|| {
                        Arc::new(Endpoint {
                            id: ids.fetch_add(1, Ordering::Relaxed),
                            config: e.clone(),
                            health: EndpointHealth::new(
                                Breaker::new(config.breaker_failures, config.breaker_open)
                                    .probed_by(prober),
                            ),
                            twin: twin_of(p),
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
        let now = Instant::now();
        let keys = config
            .api_keys
            .iter()
            .map(|k| KeyState::new(k.clone(), now))
            .collect();
        Ok(Self {
            config: Arc::new(config),
            pools,
            keys,
        })
    }

    /// The endpoint of this table with the name and URL of `e`, if any.
    fn endpoint_like(&self, e: &EndpointConfig) -> Option<Arc<Endpoint>> {
        self.pools
            .iter()
            .flat_map(|p| p.endpoints.iter())
            .find(|x| x.config.name == e.name && x.config.url == e.url)
            .cloned()
    }

    /// Every model any pool serves, each once, in config order.
    pub(crate) fn models(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for model in self.pools.iter().flat_map(|p| &p.config.models) {
            if !names.contains(&model.as_str()) {
                names.push(model);
            }
        }
        names
    }
}

/// The mirror an endpoint of pool `p` gets: one per endpoint of a CPU pool with a service model.
fn twin_of(p: &PoolConfig) -> Option<Twin> {
    match (p.kind, &p.service) {
        (PoolKind::Cpu, Some(curve)) => Some(Twin::new(curve, Instant::now())),
        _ => None,
    }
}
