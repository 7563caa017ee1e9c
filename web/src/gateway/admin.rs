//! The admin API: reload the config file, drain and undrain pools, and the live state of every
//! endpoint and of the accounting.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Instant,
};

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use chrono::Utc;
use serde_json::{Value, json};

use super::{state::GatewayState, table::Pool};
use crate::openai_error::ApiError;

/// `POST /admin/reload`: re-reads the config file.
pub(crate) async fn reload(State(state): State<Arc<GatewayState>>) -> Response {
    match state.reload().await {
        Ok(()) => Json(json!({"reloaded": true})).into_response(),
        Err(e) => ApiError::invalid(e.to_string()).into_response(),
    }
}

fn set_drain(state: &GatewayState, name: &str, drained: bool) -> Response {
    let table = state.table();
    match table.pools.iter().find(|p| p.config.name == name) {
        Some(p) => {
            p.drained.store(drained, Ordering::Relaxed);
            let in_flight: u32 = p
                .endpoints
                .iter()
                .map(|e| e.health.in_flight.load(Ordering::Relaxed))
                .sum();
            Json(json!({"pool": name, "drained": drained, "in_flight": in_flight})).into_response()
        }
        None => ApiError {
            status: StatusCode::NOT_FOUND,
            ..ApiError::invalid(format!("no pool named `{name}`"))
        }
        .into_response(),
    }
}

/// `POST /admin/pools/{name}/drain`: no new requests for the pool.
pub(crate) async fn drain(
    State(state): State<Arc<GatewayState>>,
    Path(name): Path<String>,
) -> Response {
    set_drain(&state, &name, true)
}

/// `POST /admin/pools/{name}/undrain`: the pool takes requests again.
pub(crate) async fn undrain(
    State(state): State<Arc<GatewayState>>,
    Path(name): Path<String>,
) -> Response {
    set_drain(&state, &name, false)
}

/// `GET /admin/state`: every pool's endpoints (load, breaker, latency) and the accounting's figures.
pub(crate) async fn state(State(state): State<Arc<GatewayState>>) -> Response {
    let table = state.table();
    let now = Instant::now();
    let pools: Vec<Value> = table.pools.iter().map(|p| pool_state(p, now)).collect();
    let (day, month, gpu_share) = state.accounting.spent(Utc::now());
    Json(json!({
        "pools": pools,
        "spent_today_usd": day,
        "spent_month_usd": month,
        "gpu_share_today": gpu_share,
        "accounting_queue": state.accounting.queued(),
        "accounting_written": state.accounting.written.load(Ordering::Relaxed),
        "accounting_dropped": state.accounting.dropped.load(Ordering::Relaxed),
        "store_down": state.accounting.store_down.load(Ordering::Relaxed),
    }))
    .into_response()
}

/// One pool's live state as `GET /admin/state` shows it.
fn pool_state(p: &Pool, now: Instant) -> Value {
    let endpoints: Vec<Value> = p
        .endpoints
        .iter()
        .map(|e| {
            let (ttft, tpot) = e.health.latency(now);
            json!({
                "name": e.config.name,
                "in_flight": e.health.in_flight.load(Ordering::Relaxed),
                "breaker": format!("{:?}", e.health.breaker_state().gauge()),
                "available": e.health.available(now),
                "ewma_ttft_ms": ttft * 1e3,
                "ewma_tpot_ms": tpot * 1e3,
                "completed": e.health.completed.load(Ordering::Relaxed),
            })
        })
        .collect();
    json!({"name": p.config.name, "drained": p.drained.load(Ordering::Relaxed), "endpoints": endpoints})
}
