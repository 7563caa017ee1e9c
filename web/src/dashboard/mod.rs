//! The dashboard: server-rendered pages (askama templates, SVG charts drawn with plotters) and the JSON
//! API behind each page, all read from the store.
//!
//! Every page has a JSON twin under `/api/` built from the same view model, so what a page shows and
//! what the API returns cannot drift apart. `/api/openapi.json` describes the API.
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! let store = strata_controller::store::open("sqlite::memory:").await?;
//! let app = strata_web::dashboard::router(store);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let shutdown = async {
//!     tokio::signal::ctrl_c().await.ok();
//! };
//! strata_web::listener::serve(listener, app, Default::default(), shutdown).await;
//! # Ok(()) }
//! ```

mod api;
mod charts;
mod error;
mod fmt;
mod openapi;
mod pages;
mod query;
mod view;

use std::sync::Arc;

use axum::{Router, response::Redirect, routing::get};
use strata_controller::store::Store;

pub use self::error::DashboardError;

/// The dashboard's routes: the pages, their JSON API under `/api/`, and `/api/openapi.json`.
pub fn router(store: Arc<dyn Store>) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/configs") }))
        .route("/configs", get(pages::configs))
        .route("/runs/{id}", get(pages::run))
        .route("/plans", get(pages::plans))
        .route("/pilots", get(pages::pilots))
        .route("/gateway", get(pages::gateway))
        .route("/api/configs", get(api::configs))
        .route("/api/runs/{id}", get(api::run))
        .route("/api/plans", get(api::plans))
        .route("/api/pilots", get(api::pilots))
        .route("/api/gateway", get(api::gateway))
        .route("/api/openapi.json", get(api::openapi))
        .fallback(pages::not_found)
        .with_state(store)
}
