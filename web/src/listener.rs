//! The accept loop every listener runs (engine server, gateway, dashboard): HTTP/1.1 connections with a
//! header read timeout (answered with a JSON 408 before the connection closes), a request body timeout
//! (answered 408 by the handler reading the body), an idle keep-alive timeout, a cap on open connections, a header-size check answered with a JSON 431, and
//! graceful shutdown. A response that is being sent (a server-sent event stream included) is never cut
//! by these timeouts: they only run while the server waits for the client.

mod activity;
mod body;

use std::{convert::Infallible, future::Future, pin::Pin, sync::Arc, time::Duration};

use axum::{
    Router,
    body::Body,
    http::{HeaderMap, Request, Response, StatusCode},
    response::IntoResponse,
};
use hyper::{body::Incoming, server::conn::http1};
use hyper_util::rt::TokioIo;
use tokio::{
    io::AsyncWriteExt,
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore, watch},
};
use tower::ServiceExt;

use crate::openai_error::ApiError;
use activity::{Activity, Waiting, Watched};
use body::{DeadlineBody, InFlightBody};

pub use body::BodyTimeout;

/// Header fields a request may carry; more are answered 431.
pub const MAX_HEADER_FIELDS: usize = 100;
/// Most connections a listener may be configured to hold open.
pub const MAX_CONNECTIONS: usize = 1 << 20;

/// hyper parses this many header fields before refusing with its own (bodiless) 431, so that up to it
/// the JSON 431 of [`MAX_HEADER_FIELDS`] answers instead.
const PARSED_HEADER_FIELDS: usize = 4 * MAX_HEADER_FIELDS;
/// hyper's default read buffer: headers beyond it get hyper's bodiless 431.
const HYPER_DEFAULT_BUFFER: usize = 8192 + 4096 * 100;

/// The limits of one listener, applied to each of its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Time from the first byte of a request to the end of its headers; past it the client gets a
    /// JSON 408 and the connection closes.
    pub header_timeout: Duration,
    /// Time from the end of a request's headers to the end of its body; past it the body read fails
    /// and the handler answers 408.
    pub body_timeout: Duration,
    /// Time a kept-alive connection may wait for its next request before it is closed.
    pub idle_timeout: Duration,
    /// Connections open at once; more wait in the kernel's accept queue until one closes.
    pub max_connections: usize,
    /// Largest total size of a request's header fields (names, values, `: ` and line ends), bytes;
    /// more is answered 431.
    pub max_header_bytes: usize,
}

impl Default for ListenerLimits {
    /// Headers within 10 s, a body within 30 s, 60 s idle, 1024 connections, 32 KiB of headers.
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
            max_header_bytes: 32 << 10,
        }
    }
}

/// Serves `router` on `listener` under `limits` until `shutdown` resolves, then stops accepting, closes
/// idle connections and waits for in-flight requests (streams included) to finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ListenerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let cap = limits.max_connections.clamp(1, MAX_CONNECTIONS);
    let slots = Arc::new(Semaphore::new(cap));
    let (stop, stopping) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener, &slots) => accepted,
        };
        let Some((stream, permit)) = accepted else {
            continue;
        };
        // Small SSE chunks and a stream's last chunk go out at once instead of waiting on Nagle.
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            router: router.clone(),
            limits,
            stopping: stopping.clone(),
            _slot: permit,
        };
        tokio::spawn(connection.run(stream));
    }
    drop(listener);
    stop.send_replace(true);
    // Each connection holds a slot until it ends: every slot back means every connection is done.
    let all = u32::try_from(cap).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
}

/// The next connection once a slot is free; `None` when the accept failed (retried by the caller).
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> Option<(TcpStream, OwnedSemaphorePermit)> {
    let permit = slots.clone().acquire_owned().await.ok()?;
    match listener.accept().await {
        Ok((stream, _)) => Some((stream, permit)),
        Err(e) if is_connection_error(&e) => None,
        Err(e) => {
            // Out of file descriptors and the like: wait instead of spinning.
            tracing::error!(error = %e, "accepting a connection failed; retrying in 1 s");
            tokio::time::sleep(Duration::from_secs(1)).await;
            None
        }
    }
}

/// An error of the one connection being accepted, not of the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    )
}

/// One accepted connection and what it needs to run.
struct Connection {
    router: Router,
    limits: ListenerLimits,
    stopping: watch::Receiver<bool>,
    /// Held until the connection ends.
    _slot: OwnedSemaphorePermit,
}

impl Connection {
    /// Serves requests on `stream` until the client closes it, a timeout closes it, or shutdown
    /// finishes its last request.
    async fn run(mut self, stream: TcpStream) {
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched::new(stream, activity.clone()));
        let service = Guarded {
            router: self.router.clone(),
            activity: activity.clone(),
            limits: self.limits,
        };
        let mut connection = http1_builder(&self.limits).serve_connection(io, service);
        let mut draining = false;
        loop {
            let deadline = activity.deadline(&self.limits);
            tokio::select! {
                result = &mut connection => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "a connection ended with an error");
                    }
                    return;
                }
                () = stop_requested(&mut self.stopping), if !draining => {
                    Pin::new(&mut connection).graceful_shutdown();
                    draining = true;
                }
                () = activity.changed() => {}
                () = sleep_until(deadline) => match activity.expired(&self.limits) {
                    Some(Waiting::Idle) => return,
                    Some(Waiting::Headers) => {
                        tracing::debug!("closing a connection whose request headers are late");
                        let io = connection.into_parts().io.into_inner();
                        answer_late_headers(io, self.limits.header_timeout).await;
                        return;
                    }
                    None => {}
                },
            }
        }
    }
}

/// Resolves once shutdown began (at once if it already had).
async fn stop_requested(stopping: &mut watch::Receiver<bool>) {
    // A closed channel means the accept loop is gone: stop as well.
    let _ = stopping.wait_for(|&stop| stop).await;
}

/// Tells a client whose request headers did not arrive in time so with a JSON 408, as far as it
/// reads within a second, before its connection closes.
async fn answer_late_headers(mut io: Watched, timeout: Duration) {
    let body = ApiError::timed_out(format!(
        "The request headers did not arrive within {} ms",
        timeout.as_millis()
    ))
    .body()
    .to_string();
    let answer = format!(
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let send = async {
        io.write_all(answer.as_bytes()).await?;
        io.shutdown().await
    };
    match tokio::time::timeout(Duration::from_secs(1), send).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "a late client's 408 could not be sent"),
        Err(_) => tracing::debug!("a late client did not take its 408 within 1 s"),
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn http1_builder(limits: &ListenerLimits) -> http1::Builder {
    let mut builder = http1::Builder::new();
    // The connection's own watch owns the header timeout: hyper's would also run while a kept-alive
    // connection waits for its next request, making it an idle timeout too.
    builder
        .header_read_timeout(None)
        .max_headers(PARSED_HEADER_FIELDS)
        .max_buf_size(
            limits
                .max_header_bytes
                .saturating_mul(2)
                .max(HYPER_DEFAULT_BUFFER),
        );
    builder
}

/// The router behind a connection: counts requests in flight for the connection's timeouts, checks
/// header size and puts the body under its deadline.
#[derive(Clone)]
struct Guarded {
    router: Router,
    activity: Arc<Activity>,
    limits: ListenerLimits,
}

type BoxedResponse =
    Pin<Box<dyn Future<Output = Result<Response<InFlightBody>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for Guarded {
    type Response = Response<InFlightBody>;
    type Error = Infallible;
    type Future = BoxedResponse;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let in_flight = self.activity.request_started();
        let router = self.router.clone();
        let limits = self.limits;
        Box::pin(async move {
            let response = match oversized_headers(request.headers(), limits.max_header_bytes) {
                Some(refusal) => refusal.into_response(),
                None => {
                    let request =
                        request.map(|body| Body::new(DeadlineBody::new(body, limits.body_timeout)));
                    match router.oneshot(request).await {
                        Ok(response) => response,
                        Err(never) => match never {},
                    }
                }
            };
            Ok(response.map(|body| InFlightBody::new(body, in_flight)))
        })
    }
}

/// The 431 for headers over `max_bytes` in all or over [`MAX_HEADER_FIELDS`] fields.
fn oversized_headers(headers: &HeaderMap, max_bytes: usize) -> Option<ApiError> {
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    let message = if bytes > max_bytes {
        format!("The request headers exceed {max_bytes} bytes")
    } else if headers.len() > MAX_HEADER_FIELDS {
        format!("The request has more than {MAX_HEADER_FIELDS} header fields")
    } else {
        return None;
    };
    Some(ApiError {
        status: StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        ..ApiError::invalid(message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn headers_over_the_size_or_field_limit_are_refused() {
        let mut headers = HeaderMap::new();
        headers.insert("x-a", HeaderValue::from_static("0123456789"));
        assert_eq!(oversized_headers(&headers, 17), None);
        let refused = oversized_headers(&headers, 16).map(|e| e.status);
        assert_eq!(refused, Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE));
        for i in 0..MAX_HEADER_FIELDS {
            headers.append("x-b", HeaderValue::from(i));
        }
        let refused = oversized_headers(&headers, 1 << 20).expect("too many fields");
        assert!(
            refused.message.contains("header fields"),
            "{}",
            refused.message
        );
    }
}
