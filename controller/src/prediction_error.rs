//! How close a gateway's per-request latency predictions came, read from its decision rows: per pool,
//! for the time to first token and the end-to-end latency, the mean absolute percentage error (MAPE),
//! the 90th percentile of the absolute relative error and the mean signed error (above 0: predictions
//! too long), for the service model's own prediction (`raw`) and for the one routing used after the
//! endpoint's online correction (`corrected`). A row counts where both its prediction and its
//! observation are there and the observation is above 0 (a TTFT is observed on streamed answers only).
//!
//! The end-to-end errors are also split by what no prediction made at routing time can know: whether
//! later requests reached the same endpoint while the request ran (on a CPU engine each later prompt
//! stalls the requests decoding there for its prefill).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use serde::{Deserialize, Serialize};

use crate::store::GatewayDecisionRow;

/// The errors of one kind of prediction over some requests.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ErrorSummary {
    /// Requests scored.
    pub requests: usize,
    /// Mean of |predicted - observed| / observed.
    pub mape: f64,
    /// 90th percentile (nearest rank) of |predicted - observed| / observed.
    pub p90: f64,
    /// Mean of (predicted - observed) / observed.
    pub bias: f64,
}

impl ErrorSummary {
    /// The summary of `(predicted, observed)` pairs; none when no pair has an observation above 0.
    pub fn of(pairs: impl IntoIterator<Item = (f64, f64)>) -> Option<ErrorSummary> {
        let signed: Vec<f64> = pairs
            .into_iter()
            .filter(|(p, o)| *o > 0.0 && p.is_finite() && o.is_finite())
            .map(|(p, o)| (p - o) / o)
            .collect();
        if signed.is_empty() {
            return None;
        }
        let n = signed.len() as f64;
        let mut absolute: Vec<f64> = signed.iter().map(|e| e.abs()).collect();
        absolute.sort_by(f64::total_cmp);
        let rank = (0.9 * n).ceil() as usize;
        Some(ErrorSummary {
            requests: signed.len(),
            mape: absolute.iter().sum::<f64>() / n,
            p90: absolute[rank.clamp(1, absolute.len()) - 1],
            bias: signed.iter().sum::<f64>() / n,
        })
    }
}

/// One latency's errors, before and after the online correction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencyErrors {
    /// The service model's own prediction.
    pub raw: Option<ErrorSummary>,
    /// The prediction routing used.
    pub corrected: Option<ErrorSummary>,
}

/// The corrected end-to-end errors of a pool's requests, split by whether a later request was routed
/// to the same endpoint before they ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LaterArrivals {
    /// Requests no later request met.
    pub none: Option<ErrorSummary>,
    /// Requests that later ones met.
    pub some: Option<ErrorSummary>,
}

/// The prediction errors of one pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolErrors {
    /// The pool's name.
    pub pool: String,
    /// Time to first token.
    pub ttft: LatencyErrors,
    /// End to end.
    pub e2e: LatencyErrors,
    /// The corrected end-to-end errors by later arrivals (absent from reports made before the split).
    #[serde(default)]
    pub e2e_by_later: LaterArrivals,
}

/// The prediction errors of `rows`, per pool in name order; pools with no scored request are left out.
pub fn pool_errors(rows: &[GatewayDecisionRow]) -> Vec<PoolErrors> {
    let mut by_pool: BTreeMap<&str, Vec<&GatewayDecisionRow>> = BTreeMap::new();
    for r in rows {
        by_pool.entry(r.pool.as_str()).or_default().push(r);
    }
    by_pool
        .into_iter()
        .map(|(pool, rows)| PoolErrors {
            pool: pool.to_owned(),
            ttft: latency_errors(&rows, |r| {
                (
                    r.raw_predicted_ttft_ms,
                    r.predicted_ttft_ms,
                    r.observed_ttft_ms,
                )
            }),
            e2e: latency_errors(&rows, |r| {
                (
                    r.raw_predicted_latency_ms,
                    r.predicted_latency_ms,
                    r.observed_latency_ms,
                )
            }),
            e2e_by_later: by_later_arrivals(&rows),
        })
        .filter(|p| p.ttft.corrected.is_some() || p.e2e.corrected.is_some())
        .collect()
}

/// The corrected end-to-end errors of `rows` (one pool's), split by whether a later request was
/// routed to the same endpoint before each ended: the first one routed after it on its endpoint
/// tells, so each endpoint's rows are sorted once and each row looks up one neighbour.
fn by_later_arrivals(rows: &[&GatewayDecisionRow]) -> LaterArrivals {
    let mut by_endpoint: BTreeMap<&str, Vec<DateTime<Utc>>> = BTreeMap::new();
    for r in rows {
        by_endpoint
            .entry(r.endpoint.as_str())
            .or_default()
            .push(r.decided_at);
    }
    by_endpoint.values_mut().for_each(|times| times.sort());
    let met_later = |r: &GatewayDecisionRow| {
        let Some(latency) = r.observed_latency_ms else {
            return false;
        };
        let end = r.decided_at + chrono::Duration::microseconds((latency * 1e3) as i64);
        let times = &by_endpoint[r.endpoint.as_str()];
        let next = times.partition_point(|&t| t <= r.decided_at);
        times.get(next).is_some_and(|&t| t < end)
    };
    let (mut none, mut some) = (Vec::new(), Vec::new());
    for r in rows {
        if let (Some(p), Some(o)) = (r.predicted_latency_ms, r.observed_latency_ms) {
            if met_later(r) { &mut some } else { &mut none }.push((p, o));
        }
    }
    LaterArrivals {
        none: ErrorSummary::of(none),
        some: ErrorSummary::of(some),
    }
}

/// (raw, corrected, observed) of one latency of a row.
type Figures = (Option<f64>, Option<f64>, Option<f64>);

fn latency_errors(
    rows: &[&GatewayDecisionRow],
    figures: impl Fn(&GatewayDecisionRow) -> Figures,
) -> LatencyErrors {
    let pairs = |pick: fn(Figures) -> Option<f64>| {
        ErrorSummary::of(rows.iter().filter_map(|r| {
            let f = figures(r);
            Some((pick(f)?, f.2?))
        }))
    };
    LatencyErrors {
        raw: pairs(|f| f.0),
        corrected: pairs(|f| f.1),
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::store::{GatewayDecisionId, LIVE_TRAFFIC};

    fn row(pool: &str, raw: f64, corrected: f64, observed: Option<f64>) -> GatewayDecisionRow {
        GatewayDecisionRow {
            id: GatewayDecisionId(1),
            decided_at: Utc::now(),
            request_id: "r".into(),
            sla_class: "chat".into(),
            pool: pool.into(),
            endpoint: "e".into(),
            reason: "cpu_meets_sla".into(),
            predicted_latency_ms: Some(corrected * 2.0),
            observed_latency_ms: observed.map(|o| o * 2.0),
            prompt_tokens: 10,
            output_tokens: 5,
            cost_usd: 0.0,
            source: LIVE_TRAFFIC.into(),
            predicted_ttft_ms: Some(corrected),
            observed_ttft_ms: observed,
            raw_predicted_ttft_ms: Some(raw),
            raw_predicted_latency_ms: Some(raw * 2.0),
            other_pools: None,
        }
    }

    #[test]
    fn errors_are_summed_per_pool_before_and_after_the_correction() {
        let rows = [
            row("cpu", 50.0, 90.0, Some(100.0)),
            row("cpu", 150.0, 110.0, Some(100.0)),
            row("cpu", 100.0, 100.0, Some(0.0)),
            row("gpu", 100.0, 100.0, None),
            row("cpu", 80.0, 120.0, Some(100.0)),
        ];
        let errors = pool_errors(&rows);
        assert_eq!(errors.len(), 1, "the GPU pool has nothing observed");
        let cpu = &errors[0];
        let raw = cpu.ttft.raw.expect("raw");
        assert_eq!(raw.requests, 3);
        assert!((raw.mape - (0.5 + 0.5 + 0.2) / 3.0).abs() < 1e-12);
        assert!((raw.p90 - 0.5).abs() < 1e-12);
        assert!((raw.bias - (-0.5 + 0.5 - 0.2) / 3.0).abs() < 1e-12);
        let corrected = cpu.e2e.corrected.expect("corrected");
        assert!((corrected.mape - (0.1 + 0.1 + 0.2) / 3.0).abs() < 1e-12);
        assert!((corrected.p90 - 0.2).abs() < 1e-12);
        assert!(ErrorSummary::of([(1.0, 0.0)]).is_none());
    }

    /// A request routed while another ran on its endpoint is a later arrival for that one only; a
    /// request on another endpoint, or routed after the end, is none.
    #[test]
    fn end_to_end_errors_are_split_by_later_arrivals_on_the_same_endpoint() {
        let t0 = Utc::now();
        let at =
            |id: i64, endpoint: &str, s: f64, predicted: f64, observed: f64| GatewayDecisionRow {
                id: GatewayDecisionId(id),
                decided_at: t0 + chrono::Duration::milliseconds((s * 1e3) as i64),
                endpoint: endpoint.into(),
                predicted_latency_ms: Some(predicted),
                observed_latency_ms: Some(observed),
                ..row("cpu", 100.0, 100.0, Some(100.0))
            };
        let rows = [
            at(1, "a", 0.0, 500.0, 1000.0),
            at(2, "b", 0.2, 900.0, 1000.0),
            at(3, "a", 0.5, 1000.0, 1000.0),
            at(4, "a", 5.0, 1100.0, 1000.0),
        ];
        let split = pool_errors(&rows)[0].e2e_by_later;
        let met = split.some.expect("the first request met the third");
        assert_eq!(met.requests, 1);
        assert!((met.mape - 0.5).abs() < 1e-12 && (met.bias + 0.5).abs() < 1e-12);
        let alone = split.none.expect("the others met none");
        assert_eq!(alone.requests, 3);
        assert!((alone.mape - (0.1 + 0.0 + 0.1) / 3.0).abs() < 1e-12);
    }
}
