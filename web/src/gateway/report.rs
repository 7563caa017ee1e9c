//! What an answered request leaves behind: metrics, its endpoint's latency figures, the error of its
//! latency prediction (which also teaches the endpoint's online correction) and one accounting row.
//! Tokens come from the upstream's `usage`, else the estimate; a per-token price is charged on them, a
//! per-hour price as the request's share of an endpoint-hour at the pool's `tokens_per_s`.
//!
//! A prediction is made for the output tokens planned (`max_tokens`); an answer that stopped earlier is
//! compared with the same prediction carried to the tokens it had: the predicted first token, then the
//! predicted pace for each token after it.

use std::{
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use strata_controller::store::{LIVE_TRAFFIC, NewGatewayDecision, PoolPrediction};
use strata_planner::route::Prediction;

use super::{
    accounting::Record,
    config::ClassConfig,
    state::GatewayState,
    table::{Endpoint, Pool, Table},
};

/// What the accounting of one answered request needs.
pub(crate) struct Done {
    /// The request id.
    pub(crate) id: String,
    /// Index of its SLA class.
    pub(crate) class: usize,
    /// Index of the pool that answered.
    pub(crate) pool: usize,
    /// The endpoint that answered.
    pub(crate) endpoint: Arc<Endpoint>,
    /// The routing reasons' codes.
    pub(crate) reason: String,
    /// The prediction routing used (after the endpoint's online correction).
    pub(crate) predicted: Prediction,
    /// The service model's own prediction, before the correction.
    pub(crate) raw: Prediction,
    /// The output tokens the predictions were made for.
    pub(crate) planned_output: u32,
    /// What the other pools were predicted to give, by pool index.
    pub(crate) others: Vec<(usize, Prediction)>,
    /// When the request arrived.
    pub(crate) arrived: Instant,
    /// When the attempt that answered was routed.
    pub(crate) decided_at: DateTime<Utc>,
    /// Prompt tokens as estimated before sending.
    pub(crate) prompt_estimate: u32,
}

/// What a finished request showed.
pub(crate) struct Seen {
    /// `ok`, `upstream_4xx`, `stream_error` or `client_gone`.
    pub(crate) outcome: &'static str,
    /// Tokens the upstream reported: (prompt, completion).
    pub(crate) usage: Option<(u64, u64)>,
    /// Output tokens to charge when the upstream reported none.
    pub(crate) output_estimate: u64,
    /// Time to the first byte of a stream.
    pub(crate) ttft: Option<Duration>,
    /// Time to the last byte.
    pub(crate) e2e: Duration,
}

/// Counts the request in the metrics, feeds a success's latency to its endpoint, and queues its
/// accounting row.
pub(crate) fn account(state: &GatewayState, table: &Table, done: &Done, seen: Seen) {
    let pool = &table.pools[done.pool];
    let class = &table.config.classes[done.class];
    state
        .metrics
        .requests
        .with_label_values(&[pool.config.name.as_str(), class.name.as_str(), seen.outcome])
        .inc();
    let (prompt, output) = seen
        .usage
        .unwrap_or((u64::from(done.prompt_estimate), seen.output_estimate));
    let produced = u32::try_from(output).unwrap_or(u32::MAX).max(1);
    let at_produced = |p: Prediction| p.for_output(done.planned_output, produced);
    let (predicted, raw) = (at_produced(done.predicted), at_produced(done.raw));
    if seen.outcome == "ok" {
        observe_success(state, pool, class, done, &seen, output);
        score_and_learn(state, pool, done, &seen, Scored { predicted, raw });
    }
    let others: Vec<PoolPrediction> = done
        .others
        .iter()
        .map(|&(i, p)| {
            let p = at_produced(p);
            PoolPrediction {
                pool: table.pools[i].config.name.clone(),
                ttft_ms: p.ttft_s * 1e3,
                e2e_ms: p.e2e_s * 1e3,
            }
        })
        .collect();
    let cost = pool.config.price.cost(prompt + output);
    state.accounting.push(Record {
        decision: NewGatewayDecision {
            decided_at: done.decided_at,
            request_id: done.id.clone(),
            sla_class: class.name.clone(),
            pool: pool.config.name.clone(),
            endpoint: done.endpoint.config.name.clone(),
            reason: done.reason.clone(),
            predicted_latency_ms: Some(predicted.e2e_s * 1e3),
            observed_latency_ms: Some(seen.e2e.as_secs_f64() * 1e3),
            prompt_tokens: prompt as i64,
            output_tokens: output as i64,
            cost_usd: cost,
            source: LIVE_TRAFFIC.to_owned(),
            predicted_ttft_ms: Some(predicted.ttft_s * 1e3),
            observed_ttft_ms: seen.ttft.map(|t| t.as_secs_f64() * 1e3),
            raw_predicted_ttft_ms: Some(raw.ttft_s * 1e3),
            raw_predicted_latency_ms: Some(raw.e2e_s * 1e3),
            other_pools: serde_json::to_value(others).ok(),
        },
    });
}

/// One answered request's predictions, carried to the output tokens it `produced`.
struct Scored {
    predicted: Prediction,
    raw: Prediction,
}

/// |predicted - observed| / observed (none for an observation of 0).
fn relative_error(predicted: f64, observed: f64) -> Option<f64> {
    (observed > 0.0).then(|| (predicted - observed).abs() / observed)
}

/// Puts the relative errors of a successful request's predictions (raw and corrected, TTFT when it was
/// streamed, E2E always) in the metrics, and teaches its endpoint's correction from the corrected one.
fn score_and_learn(state: &GatewayState, pool: &Pool, done: &Done, seen: &Seen, scored: Scored) {
    let Scored { predicted, raw } = scored;
    let e2e = seen.e2e.as_secs_f64();
    let ttft = seen.ttft.map(|t| t.as_secs_f64());
    let endpoint = done.endpoint.config.name.as_str();
    let observe = |latency: &str, prediction: &str, p: f64, o: f64| {
        if let Some(error) = relative_error(p, o) {
            state
                .metrics
                .prediction_error
                .with_label_values(&[pool.config.name.as_str(), endpoint, latency, prediction])
                .observe(error);
        }
    };
    observe("e2e", "raw", raw.e2e_s, e2e);
    observe("e2e", "corrected", predicted.e2e_s, e2e);
    if let Some(t) = ttft {
        observe("ttft", "raw", raw.ttft_s, t);
        observe("ttft", "corrected", predicted.ttft_s, t);
    }
    done.endpoint
        .health
        .learn(|l| l.observe(predicted, ttft, e2e));
    let c = done.endpoint.health.correction();
    let gauge = |part: &str, value: f64| {
        state
            .metrics
            .correction
            .with_label_values(&[endpoint, part])
            .set(value);
    };
    gauge("first_token", c.first_token);
    gauge("decode", c.decode);
}

/// The latency and SLA metrics of a successful request, and its endpoint's TTFT and per-token figures.
fn observe_success(
    state: &GatewayState,
    pool: &Pool,
    class: &ClassConfig,
    done: &Done,
    seen: &Seen,
    output: u64,
) {
    let m = &state.metrics;
    let (ttft, e2e) = (seen.ttft, seen.e2e);
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
