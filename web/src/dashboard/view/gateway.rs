//! The gateway page: the recent traffic by source, pool and class, how close the per-request latency
//! predictions came (per pool, before and after the online correction), today's spend against the
//! budget, and the endpoints' breakers.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use strata_controller::{
    prediction_error::{PoolErrors, pool_errors},
    store::{GatewayDecisionRow, Store, TimeWindow},
};

use super::{DashboardError, read_workload};

/// The gateway's recent traffic.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct GatewayView {
    pub(crate) window_minutes: i64,
    pub(crate) generated_at: DateTime<Utc>,
    /// The source shown (`live`, `pilot:WORKLOAD`), or `None` for every source.
    pub(crate) source: Option<String>,
    /// Requests by source within the window, whatever the filter.
    pub(crate) sources: Vec<SourceCount>,
    pub(crate) requests: usize,
    /// Requests by pool and SLA class.
    pub(crate) traffic: Vec<TrafficRow>,
    /// How close each pool's latency predictions came.
    pub(crate) predictions: Vec<PoolErrors>,
    /// Predicted against observed E2E of the newest scored requests, for the calibration plot.
    pub(crate) calibration: Vec<CalibrationPoint>,
    pub(crate) spend: Spend,
    /// The latest breaker event of each endpoint that had one.
    pub(crate) breakers: Vec<BreakerState>,
    /// The newest decisions.
    pub(crate) recent: Vec<GatewayDecisionRow>,
}

/// The requests of one source within the window.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SourceCount {
    pub(crate) source: String,
    pub(crate) requests: usize,
}

/// One request's end-to-end latency, predicted (raw and corrected) and observed.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CalibrationPoint {
    pub(crate) pool: String,
    pub(crate) raw_predicted_ms: Option<f64>,
    pub(crate) predicted_ms: f64,
    pub(crate) observed_ms: f64,
}

/// Most requests drawn in the calibration plot.
const MAX_CALIBRATION_POINTS: usize = 2_000;

/// The newest requests of `decisions` (newest first) with a predicted and an observed E2E.
fn calibration_points(decisions: &[GatewayDecisionRow]) -> Vec<CalibrationPoint> {
    decisions
        .iter()
        .filter_map(|d| {
            Some(CalibrationPoint {
                pool: d.pool.clone(),
                raw_predicted_ms: d.raw_predicted_latency_ms,
                predicted_ms: d.predicted_latency_ms?,
                observed_ms: d.observed_latency_ms.filter(|o| *o > 0.0)?,
            })
        })
        .take(MAX_CALIBRATION_POINTS)
        .collect()
}

/// Requests of one class sent to one pool.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TrafficRow {
    /// Where the traffic came from: `live`, or `pilot:WORKLOAD` for a pilot's replay.
    pub(crate) source: String,
    pub(crate) pool: String,
    pub(crate) class: String,
    pub(crate) requests: usize,
    pub(crate) p99_latency_ms: Option<f64>,
    /// The class's E2E p99 objective, from the workload that defines it.
    pub(crate) sla_ms: Option<f64>,
    /// The fraction of requests with an observed latency that met the objective.
    pub(crate) sla_attainment: Option<f64>,
    pub(crate) cost_usd: f64,
}

/// Today's spend against the daily budget.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Spend {
    pub(crate) today_usd: f64,
    pub(crate) today_tokens: i64,
    pub(crate) budget_per_day_usd: Option<f64>,
    /// The workload whose budget it is.
    pub(crate) budget_workload: Option<String>,
    pub(crate) used_fraction: Option<f64>,
}

/// An endpoint's circuit breaker, as the gateway last recorded it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BreakerState {
    pub(crate) endpoint: String,
    pub(crate) pool: String,
    pub(crate) state: String,
    pub(crate) at: DateTime<Utc>,
}

/// Most decisions read for one gateway view.
const MAX_DECISIONS: i64 = 20_000;

/// Builds the gateway page for the last `window_minutes`, as of `now`, of one source or of all.
pub(crate) async fn gateway(
    store: &dyn Store,
    window_minutes: i64,
    source: Option<&str>,
    now: DateTime<Utc>,
) -> Result<GatewayView, DashboardError> {
    let window = TimeWindow {
        start: now - Duration::minutes(window_minutes),
        end: now + Duration::seconds(1),
    };
    let mut decisions = store.list_gateway_decisions(window, MAX_DECISIONS).await?;
    let mut sources: BTreeMap<String, usize> = BTreeMap::new();
    for d in &decisions {
        *sources.entry(d.source.clone()).or_default() += 1;
    }
    if let Some(source) = source {
        decisions.retain(|d| d.source == source);
    }
    let workloads = store.list_workloads().await?;
    let mut slas: HashMap<String, f64> = HashMap::new();
    let mut budget = None;
    for row in &workloads {
        let w = read_workload(row)?;
        for class in &w.classes {
            if let Some(bound) = class.sla.e2e_p99_s {
                slas.entry(class.name.clone()).or_insert(bound * 1000.0);
            }
        }
        if budget.is_none() {
            budget = w.budget.per_day.map(|b| (b, w.name.clone()));
        }
    }

    let mut groups: BTreeMap<(String, String, String), Vec<&GatewayDecisionRow>> = BTreeMap::new();
    for d in &decisions {
        groups
            .entry((d.source.clone(), d.pool.clone(), d.sla_class.clone()))
            .or_default()
            .push(d);
    }
    let traffic = groups
        .into_iter()
        .map(|((source, pool, class), ds)| {
            let mut latencies: Vec<f64> = ds.iter().filter_map(|d| d.observed_latency_ms).collect();
            latencies.sort_by(f64::total_cmp);
            let p99_latency_ms = percentile(&latencies, 0.99);
            let sla_ms = slas.get(&class).copied();
            let sla_attainment = sla_ms.filter(|_| !latencies.is_empty()).map(|bound| {
                latencies.iter().filter(|l| **l <= bound).count() as f64 / latencies.len() as f64
            });
            TrafficRow {
                source,
                requests: ds.len(),
                cost_usd: ds.iter().map(|d| d.cost_usd).sum(),
                pool,
                class,
                p99_latency_ms,
                sla_ms,
                sla_attainment,
            }
        })
        .collect();

    let mut breakers: BTreeMap<String, BreakerState> = BTreeMap::new();
    // Decisions come newest first: the first breaker event per endpoint is its current state.
    for d in decisions.iter().filter(|d| d.reason.contains("breaker")) {
        breakers
            .entry(d.endpoint.clone())
            .or_insert_with(|| BreakerState {
                endpoint: d.endpoint.clone(),
                pool: d.pool.clone(),
                state: d.reason.clone(),
                at: d.decided_at,
            });
    }

    let today = store
        .ledger_total(TimeWindow::day(now.date_naive()), None)
        .await?;
    let spend = Spend {
        today_usd: today.amount_usd,
        today_tokens: today.tokens,
        budget_per_day_usd: budget.as_ref().map(|b| b.0),
        budget_workload: budget.as_ref().map(|b| b.1.clone()),
        used_fraction: budget
            .as_ref()
            .filter(|b| b.0 > 0.0)
            .map(|b| today.amount_usd / b.0),
    };
    Ok(GatewayView {
        window_minutes,
        generated_at: now,
        source: source.map(str::to_owned),
        sources: sources
            .into_iter()
            .map(|(source, requests)| SourceCount { source, requests })
            .collect(),
        requests: decisions.len(),
        traffic,
        predictions: pool_errors(&decisions),
        calibration: calibration_points(&decisions),
        spend,
        breakers: breakers.into_values().collect(),
        recent: decisions.into_iter().take(20).collect(),
    })
}

/// The `q` quantile (nearest rank) of sorted values.
fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.99), Some(99.0));
        assert_eq!(percentile(&values, 0.5), Some(50.0));
        assert_eq!(percentile(&[], 0.99), None);
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
    }
}
