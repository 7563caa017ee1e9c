//! The JSON API behind the pages: the same view models, serialized. Errors are
//! `{"error": {"message", "type", "code"}}` with a 4xx for bad input.

use std::{collections::HashMap, sync::Arc};

use axum::{
    Json,
    extract::{Path, Query, State},
};
use chrono::Utc;
use serde_json::Value;
use strata_controller::store::{ProfileRunId, Store};

use super::{
    error::{ApiError, DashboardError},
    openapi,
    query::{self, ConfigsParams},
    view::{self, ConfigsView, GatewayView, PilotsView, PlansView, RunView},
};

type ApiResult<T> = Result<Json<T>, ApiError>;

/// `GET /api/configs`: the config table.
pub(crate) async fn configs(
    State(store): State<Arc<dyn Store>>,
    Query(raw): Query<HashMap<String, String>>,
) -> ApiResult<ConfigsView> {
    let params = ConfigsParams::parse(&raw)?;
    Ok(Json(view::configs(&*store, &params).await?))
}

/// `GET /api/runs/{id}`: one run in full.
pub(crate) async fn run(
    State(store): State<Arc<dyn Store>>,
    Path(id): Path<String>,
) -> ApiResult<RunView> {
    let id = id
        .parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .map(ProfileRunId)
        .ok_or_else(|| DashboardError::bad_query("id", format!("{id:?} is not a run id")))?;
    Ok(Json(view::run(&*store, id).await?))
}

/// `GET /api/plans`: the latest plan of each workload.
pub(crate) async fn plans(State(store): State<Arc<dyn Store>>) -> ApiResult<PlansView> {
    Ok(Json(view::plans(&*store).await?))
}

/// `GET /api/pilots`: every pilot.
pub(crate) async fn pilots(State(store): State<Arc<dyn Store>>) -> ApiResult<PilotsView> {
    Ok(Json(view::pilots(&*store).await?))
}

/// `GET /api/gateway`: the gateway's recent traffic.
pub(crate) async fn gateway(
    State(store): State<Arc<dyn Store>>,
    Query(raw): Query<HashMap<String, String>>,
) -> ApiResult<GatewayView> {
    let window = query::window_minutes(&raw)?;
    let source = query::gateway_source(&raw);
    Ok(Json(
        view::gateway(&*store, window, source.as_deref(), Utc::now()).await?,
    ))
}

/// `GET /api/openapi.json`: the API's OpenAPI document.
pub(crate) async fn openapi() -> Json<Value> {
    Json(openapi::document())
}
