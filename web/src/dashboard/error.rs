//! What can go wrong serving a dashboard page or API call, and how each case answers: bad query values
//! and missing rows are the caller's (4xx, with the reason); store and template failures are ours (500,
//! with a generic text, the detail logged).

use axum::{
    Json,
    http::StatusCode,
    response::{Html, IntoResponse, Response},
};
use serde_json::json;
use strata_controller::store::StoreError;

/// A dashboard request that could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    /// A query parameter has a value the page cannot use.
    #[error("query parameter {name}: {problem}")]
    BadQuery {
        /// The parameter.
        name: &'static str,
        /// What is wrong with its value.
        problem: String,
    },
    /// The path names a row that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The store failed.
    #[error("store: {0}")]
    Store(StoreError),
    /// A stored value does not read as its producer's type (a plan, a workload, a load curve).
    #[error("stored data: {0}")]
    Stored(String),
    /// A template failed to render.
    #[error("template: {0}")]
    Render(#[from] askama::Error),
}

impl From<StoreError> for DashboardError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound { .. } => DashboardError::NotFound(err.to_string()),
            other => DashboardError::Store(other),
        }
    }
}

impl DashboardError {
    /// A bad value for query parameter `name`.
    pub(crate) fn bad_query(name: &'static str, problem: impl Into<String>) -> Self {
        DashboardError::BadQuery {
            name,
            problem: problem.into(),
        }
    }

    /// The status this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            DashboardError::BadQuery { .. } => StatusCode::BAD_REQUEST,
            DashboardError::NotFound(_) => StatusCode::NOT_FOUND,
            DashboardError::Store(_) | DashboardError::Stored(_) | DashboardError::Render(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// The text shown to the caller: the reason for 4xx, a generic sentence for 5xx (logged in full).
    fn public_message(&self) -> String {
        if self.status().is_server_error() {
            tracing::error!(error = %self, "dashboard request failed");
            "Something went wrong; the server log has the details.".to_owned()
        } else {
            self.to_string()
        }
    }

    fn code(&self) -> &'static str {
        match self {
            DashboardError::BadQuery { .. } => "bad_query",
            DashboardError::NotFound(_) => "not_found",
            DashboardError::Store(_) | DashboardError::Stored(_) | DashboardError::Render(_) => {
                "internal_error"
            }
        }
    }
}

/// A [`DashboardError`] answered as an HTML page.
#[derive(Debug)]
pub(crate) struct PageError(pub(crate) DashboardError);

impl<E: Into<DashboardError>> From<E> for PageError {
    fn from(err: E) -> Self {
        PageError(err.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let status = self.0.status();
        let message = self.0.public_message();
        let page = super::pages::error_page(status, &message);
        (status, Html(page)).into_response()
    }
}

/// A [`DashboardError`] answered as `{"error": {"message", "type", "code"}}`.
#[derive(Debug)]
pub(crate) struct ApiError(pub(crate) DashboardError);

impl<E: Into<DashboardError>> From<E> for ApiError {
    fn from(err: E) -> Self {
        ApiError(err.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.0.status();
        let kind = if status.is_server_error() {
            "server_error"
        } else {
            "invalid_request_error"
        };
        let body = json!({"error": {
            "message": self.0.public_message(),
            "type": kind,
            "code": self.0.code(),
        }});
        (status, Json(body)).into_response()
    }
}
