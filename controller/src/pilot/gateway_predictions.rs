//! The replay gateway's own per-request latency predictions, read back from the decisions it recorded
//! during the replay: how close the route's predictions came on the workload's traffic, per pool,
//! before and after the endpoints' online correction.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{
    prediction_error::{PoolErrors, pool_errors},
    store::{GatewayDecisionRow, Store, StoreError, TimeWindow},
};

/// How close the replay gateway's per-request predictions came during the replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayPredictions {
    /// The replay's offered load over the chosen config's capacity on this host (its capacity
    /// search's highest rate meeting the SLA, this run's or the latest stored); `None` when none is.
    pub load_over_capacity: Option<f64>,
    /// Requests the gateway recorded during the replay.
    pub requests: usize,
    /// Per pool, before and after the online correction.
    pub pools: Vec<PoolErrors>,
}

/// Longest wait for the gateway to write the replay's decisions.
const WRITE_WAIT: Duration = Duration::from_secs(5);
/// Most decisions read.
const MAX_ROWS: i64 = 100_000;

/// The predictions of the decisions recorded under `source` from `start` to `end`, once the `expected`
/// ones are written (or [`WRITE_WAIT`] has passed); `None` when the gateway recorded none.
///
/// # Errors
/// When the store cannot be read.
pub(super) async fn replay_predictions(
    store: &dyn Store,
    source: &str,
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    expected: usize,
) -> Result<Option<GatewayPredictions>, StoreError> {
    let window = TimeWindow { start, end };
    let waited = tokio::time::Instant::now();
    let rows = loop {
        let rows: Vec<GatewayDecisionRow> = store
            .list_gateway_decisions(window, MAX_ROWS)
            .await?
            .into_iter()
            .filter(|r| r.source == source)
            .collect();
        if rows.len() >= expected || waited.elapsed() >= WRITE_WAIT {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if rows.is_empty() {
        return Ok(None);
    }
    Ok(Some(GatewayPredictions {
        load_over_capacity: None,
        requests: rows.len(),
        pools: pool_errors(&rows),
    }))
}
