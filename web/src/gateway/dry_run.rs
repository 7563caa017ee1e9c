//! `POST /v1/route`: where a request would go and why, without forwarding it.

use std::sync::Arc;

use axum::{Json, body::Body, extract::State, http::HeaderMap};
use serde_json::{Value, json};
use strata_planner::route::PoolKind;

use super::{
    keys::KeyIndex,
    prepare::{Api, prepare, read_body},
    select::reason_code,
    state::GatewayState,
};
use crate::openai_error::ApiError;

/// Prepares and selects like a real request; a rejection is an answer here, not an error.
pub(crate) async fn dry_run(
    State(state): State<Arc<GatewayState>>,
    axum::Extension(key): axum::Extension<KeyIndex>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let table = state.table();
    let bytes = read_body(&table, body).await?;
    let api = if serde_json::from_slice::<Value>(&bytes)
        .ok()
        .is_some_and(|v| v.get("prompt").is_some())
    {
        Api::Completions
    } else {
        Api::Chat
    };
    let req = prepare(&table, key, &headers, bytes, api, || state.next_id())?;
    let class = &table.config.classes[req.class];
    let choice = match state.select(&table, &req, &[]) {
        Ok(c) => c,
        Err(e) => {
            return Ok(Json(json!({
                "target": "reject",
                "class": class.name,
                "status": e.status.as_u16(),
                "message": e.message,
            })));
        }
    };
    let p = &table.pools[choice.pool];
    let target = match p.config.kind {
        PoolKind::Cpu => "cpu",
        PoolKind::Gpu => "gpu",
    };
    let pool = &p.config.name;
    let endpoint = choice.endpoint.as_ref().map(|e| e.config.name.clone());
    let decision = choice.decision;
    let others: Vec<Value> = choice
        .others
        .iter()
        .map(|&(i, p)| {
            json!({
                "pool": table.pools[i].config.name,
                "predicted_ttft_ms": p.ttft_s * 1e3,
                "predicted_e2e_ms": p.e2e_s * 1e3,
            })
        })
        .collect();
    let reasons: Vec<Value> = decision
        .reasons
        .iter()
        .map(|r| json!({"code": reason_code(r), "text": r.to_string()}))
        .collect();
    Ok(Json(json!({
        "target": target,
        "pool": pool,
        "endpoint": endpoint,
        "class": class.name,
        "reasons": reasons,
        "predicted_ttft_ms": decision.predicted_ttft_s * 1e3,
        "predicted_e2e_ms": decision.predicted_e2e_s * 1e3,
        "raw_predicted_ttft_ms": decision.raw.ttft_s * 1e3,
        "raw_predicted_e2e_ms": decision.raw.e2e_s * 1e3,
        "targets": choice.targets,
        "other_pools": others,
        "prompt_tokens_estimate": req.prompt_tokens,
        "output_tokens_planned": req.output_tokens,
    })))
}
