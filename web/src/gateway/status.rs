//! Read-only endpoints: `/health`, `/metrics`, `/v1/models`, and the answer to unknown routes.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Instant,
};

use axum::{
    Json,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use chrono::Utc;
use serde_json::{Value, json};

use super::state::GatewayState;
use crate::openai_error::ApiError;

/// Any route the gateway does not serve.
pub(crate) async fn not_found() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        ..ApiError::invalid(
            "Unknown route; see /v1/chat/completions, /v1/completions, /v1/models, /v1/route",
        )
    }
}

/// `GET /health`: each pool's endpoints up of all.
pub(crate) async fn health(State(state): State<Arc<GatewayState>>) -> Response {
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

/// `GET /metrics`: the Prometheus text, with breaker, load, spend and queue gauges set first.
pub(crate) async fn metrics(State(state): State<Arc<GatewayState>>) -> Response {
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

/// `GET /v1/models`: every model some pool serves.
pub(crate) async fn models(State(state): State<Arc<GatewayState>>) -> Response {
    let table = state.table();
    let started = state.started();
    let data: Vec<Value> = table
        .models()
        .iter()
        .map(|n| json!({"id": n, "object": "model", "created": started, "owned_by": "strata-gateway"}))
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}
