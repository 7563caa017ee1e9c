//! Errors in the OpenAI wire format (`{"error": {"message", "type", "param", "code"}}`) with their
//! HTTP status, shared by the engine server and the gateway.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;

use crate::listener::BodyTimeout;

/// Characters of a client's value repeated in an error message; the rest is cut.
const ECHO_CHARS: usize = 64;

/// A client's `value` as an error message repeats it: control and non-ASCII characters escaped,
/// cut to [`ECHO_CHARS`] characters with the full length noted.
pub fn echo(value: &str) -> String {
    let mut escaped = value.chars().flat_map(char::escape_default);
    let cut: String = escaped.by_ref().take(ECHO_CHARS).collect();
    if escaped.next().is_none() {
        return cut;
    }
    format!("{cut}... ({} bytes)", value.len())
}

/// An error answer: status, OpenAI error body, and for overload a `Retry-After`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong, for a person.
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, `authentication_error`, ...).
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// A stable code for programs (`model_not_found`, `context_length_exceeded`, ...).
    pub code: Option<&'static str>,
    /// Seconds after which a retry may succeed.
    pub retry_after: Option<u32>,
}

impl ApiError {
    /// 400: the request is malformed or asks for something impossible.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400 naming the field at fault.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.into()),
            ..Self::invalid(message)
        }
    }

    /// 404: the model is not served here.
    pub fn model_not_found(model: &str, served: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..Self::invalid(format!(
                "The model `{}` does not exist; this server serves `{served}`",
                echo(model)
            ))
        }
    }

    /// 401: missing or wrong API key.
    pub fn unauthorized() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            kind: "authentication_error",
            code: Some("invalid_api_key"),
            ..Self::invalid("Missing or incorrect API key: send `Authorization: Bearer <key>`")
        }
    }

    /// 413: the body is larger than the server accepts.
    pub fn too_large(limit: usize) -> Self {
        Self {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            ..Self::invalid(format!("The request body exceeds {limit} bytes"))
        }
    }

    /// 408: the request did not arrive in time.
    pub fn timed_out(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::REQUEST_TIMEOUT,
            ..Self::invalid(message)
        }
    }

    /// A request body that could not be read within `limit` bytes: 413 when it is larger, 408 when
    /// it did not arrive within the listener's body timeout, 400 when its framing is malformed or the
    /// client stopped sending it.
    pub fn unreadable_body(error: axum::Error, limit: usize) -> Self {
        let inner = error.into_inner();
        if inner
            .downcast_ref::<http_body_util::LengthLimitError>()
            .is_some()
        {
            return Self::too_large(limit);
        }
        if let Some(timeout) = BodyTimeout::find(inner.as_ref()) {
            return Self::timed_out(format!(
                "The request body did not arrive within {} ms",
                timeout.0.as_millis()
            ));
        }
        tracing::debug!(error = %inner, "a request body could not be read");
        Self::invalid(format!("The request body could not be read: {inner}"))
    }

    /// 405: the path exists but not for this method (the answer of every router's method
    /// fallback).
    pub async fn method_not_allowed() -> Self {
        Self {
            status: StatusCode::METHOD_NOT_ALLOWED,
            ..Self::invalid("This path does not accept this method")
        }
    }

    /// 429: over capacity right now; retry later.
    pub fn overloaded(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::TOO_MANY_REQUESTS,
            kind: "rate_limit_error",
            code: Some("over_capacity"),
            retry_after: Some(1),
            ..Self::invalid(message)
        }
    }

    /// 503: the service cannot take requests (shutting down, no upstream).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "server_error",
            retry_after: Some(1),
            ..Self::invalid(message)
        }
    }

    /// 500: a failure on our side.
    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            ..Self::invalid(message)
        }
    }

    /// The error body as JSON.
    pub fn body(&self) -> serde_json::Value {
        serde_json::to_value(ErrorBody {
            error: ErrorDetail {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.code,
            },
        })
        .unwrap_or_default()
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.message)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_values_are_escaped_and_cut() {
        assert_eq!(echo("lax"), "lax");
        assert_eq!(echo("tïght\n"), "t\\u{ef}ght\\n");
        let long = "x".repeat(30_000);
        let e = echo(&long);
        assert!(e.starts_with(&"x".repeat(ECHO_CHARS)), "{e}");
        assert!(e.ends_with("... (30000 bytes)"), "{e}");
        assert!(e.len() < 100);
    }
}
