//! The gateway's shared state: the routing table (swapped whole on reload), the current hour of the
//! stored plan, the accounting queue, metrics and the id and random-number counters.

use std::{
    path::PathBuf,
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use strata_planner::plan::{ClassHour, Plan};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{
    GatewayError,
    accounting::{Accounting, Sink},
    config::{self, Env, GatewayConfig},
    metrics,
    prepare::Prepared,
    select::{self, Choice, Draws, PlanShares, Snapshot, Spent},
    table::Table,
    upstream,
};
use crate::openai_error::ApiError;

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
            table: RwLock::new(Arc::new(Table::empty(config.clone()))),
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
        let table = Table::build(config, None, &state.endpoint_ids)?;
        state.swap_table(table);
        Ok(Arc::new(state))
    }

    /// The current pools and keys.
    pub fn table(&self) -> Arc<Table> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn swap_table(&self, table: Table) {
        *self.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
    }

    /// The current configuration.
    pub fn config(&self) -> Arc<GatewayConfig> {
        self.table().config.clone()
    }

    /// True once shutdown began.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Marks the start of shutdown: background loops end.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// When the gateway started (UNIX seconds).
    pub(crate) fn started(&self) -> u64 {
        self.started
    }

    /// Where accounting rows go, if anywhere.
    pub(crate) fn sink(&self) -> Option<Arc<dyn Sink>> {
        self.sink.clone()
    }

    /// A slot under the gateway's concurrency limit; none when all are taken.
    pub(crate) fn try_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }

    /// A new request id.
    pub(crate) fn next_id(&self) -> String {
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

    /// Spend so far, from the accounting's ledger totals.
    fn spent(&self, now: DateTime<Utc>) -> Spent {
        let (day, month, gpu_share_today) = self.accounting.spent(now);
        Spent {
            day,
            month,
            gpu_share_today,
        }
    }

    /// Selects where `req` goes now over `table`, leaving out endpoints in `tried`.
    ///
    /// # Errors
    /// As [`select::select`].
    pub(crate) fn select(
        &self,
        table: &Table,
        req: &Prepared,
        tried: &[usize],
    ) -> Result<Choice, ApiError> {
        let plan = self.plan.read().unwrap_or_else(|p| p.into_inner()).clone();
        let snapshot = Snapshot {
            table,
            plan: &plan,
            spent: self.spent(Utc::now()),
            now: Instant::now(),
        };
        let draws = Draws {
            route: self.draw(),
            gpu_pick: self.draw(),
        };
        select::select(&snapshot, req, tried, draws)
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
                    if let Some(shares) = plan_shares(&config, &plan, hour) {
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
        let table = Table::build(config, Some(old.as_ref()), &self.endpoint_ids)?;
        self.swap_table(table);
        Ok(())
    }
}

/// The shares of `plan` at `hour` for each class of `config`; none when the plan has no such hour.
fn plan_shares(config: &GatewayConfig, plan: &Plan, hour: u32) -> Option<PlanShares> {
    let h = plan.hours.iter().find(|h| h.hour == hour)?;
    let share = |f: fn(&ClassHour) -> f64| {
        config
            .classes
            .iter()
            .map(|c| h.classes.iter().find(|x| x.class == c.name).map_or(0.0, f))
            .collect()
    };
    Some(PlanShares {
        gpu: share(|c| c.gpu_share),
        shed: share(|c| c.shed_share),
    })
}
