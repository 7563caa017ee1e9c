//! The HTML pages: each handler builds its view model (see `view`), formats it into cells and renders
//! an askama template. Render failures are 500s; bad query values are 400s with the reason.

mod configs;
mod gateway;
mod pilots;
mod plans;
mod run;

pub(crate) use self::{configs::configs, gateway::gateway, pilots::pilots, plans::plans, run::run};

use askama::Template;
use axum::{http::StatusCode, response::Html};
use chrono::{DateTime, Utc};

use super::error::{DashboardError, PageError};

type PageResult = Result<Html<String>, PageError>;

/// A timestamp as pages print it.
fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    title: String,
    active: &'a str,
    status: String,
    message: &'a str,
}

/// The HTML of an error page.
pub(crate) fn error_page(status: StatusCode, message: &str) -> String {
    let page = ErrorPage {
        title: status.to_string(),
        active: "",
        status: status.to_string(),
        message,
    };
    page.render()
        .unwrap_or_else(|_| format!("<!doctype html><title>{status}</title><p>{status}</p>"))
}

/// Any path the dashboard does not serve.
pub(crate) async fn not_found(uri: axum::http::Uri) -> axum::response::Response {
    use axum::response::IntoResponse;
    if uri.path().starts_with("/api/") {
        return super::error::ApiError(DashboardError::NotFound(
            "no such API path: the dashboard's API has /api/configs, /api/runs/ID, /api/plans, \
             /api/pilots, /api/gateway and /api/openapi.json"
                .to_owned(),
        ))
        .into_response();
    }
    PageError(DashboardError::NotFound(
        "no such page: the dashboard has /configs, /runs/ID, /plans, /pilots and /gateway"
            .to_owned(),
    ))
    .into_response()
}
