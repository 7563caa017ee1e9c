//! The gateway: an OpenAI-compatible front (`/v1/chat/completions`, `/v1/completions`, `/v1/models`)
//! that decides per request whether a CPU pool will meet the request's SLA class and otherwise sends it
//! to a GPU fallback, through the planner's pure `route`; `POST /v1/route` shows the decision.

pub mod accounting;
mod admin;
mod auth;
mod background;
pub mod config;
mod dry_run;
pub mod health;
mod keys;
pub mod metrics;
mod prepare;
mod prompt;
mod proxy;
mod report;
mod select;
mod state;
mod status;
mod table;
#[cfg(test)]
mod testing;
pub mod twin;
pub mod upstream;

use std::{path::PathBuf, sync::Arc};

use axum::{
    Router, middleware,
    routing::{get, post},
};

pub use accounting::{LazyStore, StoreSink};
pub use background::{Background, start_background};
pub use keys::KeyState;
pub use state::GatewayState;
pub use table::{Endpoint, Pool, Table};

use crate::openai_error::ApiError;
use accounting::Sink;
use config::GatewayConfig;

/// The request header that names the SLA class.
pub const SLA_HEADER: &str = strata_controller::loadgen::SLA_CLASS_HEADER;
/// The request header setting a request's own TTFT target, milliseconds.
pub const SLO_TTFT_HEADER: &str = strata_controller::protocol::SLO_TTFT_HEADER;
/// The request header setting a request's own TPOT target, milliseconds.
pub const SLO_TPOT_HEADER: &str = strata_controller::protocol::SLO_TPOT_HEADER;
/// The response header that says where a request went and why.
pub const ROUTE_HEADER: &str = strata_controller::loadgen::ROUTE_HEADER;
/// The request/response header carrying the request id.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Errors starting the gateway.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The configuration file cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Metrics could not be registered.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// An HTTP client could not be built.
    #[error("http client: {0}")]
    Client(#[from] reqwest::Error),
    /// The listener failed.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The gateway's routes over `state`.
pub fn router(state: Arc<GatewayState>) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(proxy::chat))
        .route("/v1/completions", post(proxy::completions))
        .route("/v1/route", post(dry_run::dry_run))
        .route("/v1/models", get(status::models))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ));
    let admin = Router::new()
        .route("/admin/reload", post(admin::reload))
        .route("/admin/pools/{name}/drain", post(admin::drain))
        .route("/admin/pools/{name}/undrain", post(admin::undrain))
        .route("/admin/state", get(admin::state))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::admin_auth,
        ));
    Router::new()
        .merge(v1)
        .merge(admin)
        .route("/health", get(status::health))
        .route("/metrics", get(status::metrics))
        .fallback(status::not_found)
        .method_not_allowed_fallback(ApiError::method_not_allowed)
        .with_state(state)
}

/// Serves `state` on `listener` under the config's listener limits until `shutdown` resolves, lets
/// in-flight requests (streams included) finish, then flushes the accounting queue (for at most 5 s).
pub async fn serve(
    state: Arc<GatewayState>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let background = start_background(&state);
    let limits = state.config().listener;
    crate::listener::serve(listener, router(state.clone()), limits, shutdown).await;
    state.stop();
    background.stop(&state).await;
}

/// Runs the gateway for `config` with `store` (none: accounting in memory, no plan) until `shutdown`.
/// Use [`accounting::LazyStore`] for a store that may be down at start.
///
/// # Errors
/// When the gateway cannot start or listen.
pub async fn run(
    config: GatewayConfig,
    store: Option<Arc<dyn Sink>>,
    config_path: Option<PathBuf>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), GatewayError> {
    let addr = config.listen;
    let sink = store;
    let mut config = config;
    config.resolve_stored_profiles(sink.as_deref()).await?;
    let state = GatewayState::new(config, sink, config_path)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| GatewayError::Listen { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| GatewayError::Listen { addr, source })?;
    tracing::info!("gateway on http://{bound}");
    // A line on stdout that scripts and tests wait for.
    println!("listening on http://{bound}");
    serve(state, listener, shutdown).await;
    Ok(())
}
