//! What an answered request leaves behind: metrics, its endpoint's latency figures and one accounting
//! row. Tokens come from the upstream's `usage`, else the estimate; a per-token price is charged on
//! them, a per-hour price as the request's share of an endpoint-hour at the pool's `tokens_per_s`.

use std::{
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use chrono::Utc;
use strata_controller::store::{LIVE_TRAFFIC, NewGatewayDecision};

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
    /// The predicted end-to-end latency.
    pub(crate) predicted_e2e_s: f64,
    /// When the request arrived.
    pub(crate) arrived: Instant,
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
    if seen.outcome == "ok" {
        observe_success(state, pool, class, done, &seen, output);
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
            observed_latency_ms: Some(seen.e2e.as_secs_f64() * 1e3),
            prompt_tokens: prompt as i64,
            output_tokens: output as i64,
            cost_usd: cost,
            source: LIVE_TRAFFIC.to_owned(),
        },
    });
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
