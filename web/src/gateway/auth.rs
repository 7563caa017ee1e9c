//! Authentication: client keys (compared in constant time, then rate-limited by their token bucket)
//! in front of `/v1`, the admin token in front of `/admin`.

use std::{sync::Arc, time::Instant};

use axum::{
    extract::{Request, State},
    http::{HeaderMap, header},
    middleware::Next,
    response::{IntoResponse, Response},
};

use super::{keys::KeyIndex, state::GatewayState, status};
use crate::{openai_error::ApiError, server::constant_time_eq};

/// The bearer token of `headers` (empty when there is none).
fn bearer(headers: &HeaderMap) -> &str {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
}

/// Lets a request with a known client key under its rate through, marking it with its [`KeyIndex`];
/// every request passes when no keys are configured.
pub(crate) async fn authenticate(
    State(state): State<Arc<GatewayState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let table = state.table();
    if table.keys.is_empty() {
        request.extensions_mut().insert(KeyIndex(None));
        return next.run(request).await;
    }
    let given = bearer(request.headers()).as_bytes();
    // Every key is compared (no early exit), so timing does not say which one nearly matched.
    let mut found = None;
    for (i, k) in table.keys.iter().enumerate() {
        if constant_time_eq(given, k.config.key.as_bytes()) {
            found = Some(i);
        }
    }
    let Some(i) = found else {
        return ApiError::unauthorized().into_response();
    };
    if !table.keys[i].allow(Instant::now()) {
        let mut e = ApiError::overloaded(format!(
            "Rate limit of key `{}` exceeded",
            table.keys[i].config.name
        ));
        e.code = Some("rate_limit_exceeded");
        return e.into_response();
    }
    request.extensions_mut().insert(KeyIndex(Some(i)));
    next.run(request).await
}

/// Lets a request with the admin token through; without a configured token the admin API is not there.
pub(crate) async fn admin_auth(
    State(state): State<Arc<GatewayState>>,
    request: Request,
    next: Next,
) -> Response {
    let config = state.config();
    let Some(token) = &config.admin_token else {
        return status::not_found().await.into_response();
    };
    if !constant_time_eq(bearer(request.headers()).as_bytes(), token.as_bytes()) {
        return ApiError::unauthorized().into_response();
    }
    next.run(request).await
}
