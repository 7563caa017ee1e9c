//! The gateway's background tasks: active health checks, the plan and ledger refresh, and the
//! accounting writer.

use std::{sync::Arc, time::Duration, time::Instant};

use super::state::GatewayState;

/// Background tasks: health checks, plan/ledger refresh, the accounting writer.
#[derive(Debug)]
pub struct Background {
    health: tokio::task::JoinHandle<()>,
    refresh: tokio::task::JoinHandle<()>,
    writer: tokio::task::JoinHandle<()>,
}

impl Background {
    /// Stops the checks and the refresh, then lets the writer drain the accounting queue.
    pub(crate) async fn stop(self, state: &GatewayState) {
        self.health.abort();
        self.refresh.abort();
        state.accounting.stop();
        let _ = self.writer.await;
    }
}

/// Starts the background tasks of `state`.
pub fn start_background(state: &Arc<GatewayState>) -> Background {
    let health = tokio::spawn(check_loop(state.clone()));
    let refresh = tokio::spawn(refresh_loop(state.clone()));
    let writer = tokio::spawn(
        state
            .accounting
            .clone()
            .writer(state.sink(), Duration::from_secs(5)),
    );
    Background {
        health,
        refresh,
        writer,
    }
}

/// Refreshes the plan and the ledger totals every `store.refresh_ms` until shutdown.
async fn refresh_loop(state: Arc<GatewayState>) {
    loop {
        state.refresh().await;
        let every = Duration::from_millis(state.config().store.refresh_ms.max(100));
        tokio::time::sleep(every).await;
        if state.stopping() {
            return;
        }
    }
}

/// Checks every endpoint each `interval` with GET `base + path`; 2xx counts as a success for its breaker,
/// anything else as a failure. Runs until the table's `stop` is set.
async fn check_loop(state: Arc<GatewayState>) {
    let interval = state.config().health_interval;
    if interval.is_zero() {
        return;
    }
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if state.stopping() {
            return;
        }
        let table = state.table();
        let config = state.config();
        let checks = table
            .pools
            .iter()
            .flat_map(|p| p.endpoints.iter())
            .map(|e| {
                let client = state.client.clone();
                let url = format!("{}{}", e.config.url, config.health_path);
                let key = e.config.api_key.clone();
                let timeout = config.health_timeout;
                let e = e.clone();
                async move {
                    let mut req = client.get(url).timeout(timeout);
                    if let Some(k) = key {
                        req = req.bearer_auth(k);
                    }
                    let ok = matches!(req.send().await, Ok(r) if r.status().is_success());
                    e.health.on_check(ok, Instant::now());
                }
            });
        futures_util::future::join_all(checks).await;
    }
}
