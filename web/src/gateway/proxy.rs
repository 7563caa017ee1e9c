//! The proxy: a loop of attempts, each in phases: select an endpoint, send through an [`Upstream`],
//! classify a failure (retry on another endpoint after a backoff, or stop), or relay the answer
//! (streamed chunk by chunk). Nothing is retried once a byte has reached the client.

use std::{
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use axum::{
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use serde_json::Value;
use strata_planner::route::PoolKind;
use tokio::sync::OwnedSemaphorePermit;

use super::{
    REQUEST_ID_HEADER, ROUTE_HEADER,
    keys::KeyIndex,
    prepare::{Api, Prepared, prepare, read_body},
    report::{Done, Seen, account},
    select::{Choice, reason_codes},
    state::GatewayState,
    table::{Endpoint, Pool, Table},
    twin::TwinKey,
    upstream::{
        self, BodyStream, ErrorSource, Http, OnEvents, Relay, StreamEnd, StreamSummary, Upstream,
        UpstreamError,
    },
};
use crate::openai_error::ApiError;

/// `POST /v1/chat/completions`.
pub(crate) async fn chat(
    State(state): State<Arc<GatewayState>>,
    axum::Extension(key): axum::Extension<KeyIndex>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(state, key, headers, body, Api::Chat).await
}

/// `POST /v1/completions`.
pub(crate) async fn completions(
    State(state): State<Arc<GatewayState>>,
    axum::Extension(key): axum::Extension<KeyIndex>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(state, key, headers, body, Api::Completions).await
}

/// Admits a request under the concurrency limit, prepares it and forwards it over HTTP.
async fn handle(
    state: Arc<GatewayState>,
    key: KeyIndex,
    headers: HeaderMap,
    body: Body,
    api: Api,
) -> Response {
    let arrived = Instant::now();
    let Some(permit) = state.try_slot() else {
        return ApiError::overloaded("The gateway is at capacity").into_response();
    };
    let table = state.table();
    let bytes = match read_body(&table, body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let req = match prepare(&table, key, &headers, bytes, api, || state.next_id()) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let admitted = Admitted {
        req,
        arrived,
        permit,
    };
    forward(&state, &table, &Http, admitted).await
}

/// A prepared request holding one of the gateway's concurrency slots.
pub(crate) struct Admitted {
    /// The request.
    pub(crate) req: Prepared,
    /// When it arrived.
    pub(crate) arrived: Instant,
    /// Its slot, held until the answer's last byte.
    pub(crate) permit: OwnedSemaphorePermit,
}

/// What the attempts so far have seen.
#[derive(Default)]
struct Attempts {
    tried: Vec<usize>,
    first_kind: Option<PoolKind>,
    last_error: Option<UpstreamError>,
    counted: bool,
}

impl Attempts {
    /// Counts an attempt on `endpoint` of `pool`: a failover when a request that began on CPU moves to
    /// GPU, the request itself (for the GPU share) on its first attempt.
    fn begin(&mut self, state: &GatewayState, pool: &Pool, endpoint: &Endpoint) {
        match self.first_kind {
            None => self.first_kind = Some(pool.config.kind),
            Some(PoolKind::Cpu) if pool.config.kind == PoolKind::Gpu => {
                state.metrics.failovers.inc()
            }
            _ => {}
        }
        if !self.counted {
            state
                .accounting
                .count_request(pool.config.kind == PoolKind::Gpu, Utc::now());
            self.counted = true;
        }
        self.tried.push(endpoint.id);
    }
}

/// The answer's head: status and content type.
struct Head {
    status: StatusCode,
    content_type: Option<HeaderValue>,
}

/// An upstream answer that may go to the client.
enum Answer {
    /// A stream whose first chunk arrived.
    Stream {
        head: Head,
        first: Bytes,
        rest: BodyStream,
    },
    /// A whole body.
    Whole { head: Head, body: Bytes },
}

/// Forwards `admitted` through `upstream`: up to the config's `retry_attempts` attempts, each on an
/// endpoint not tried yet, with doubling backoff between them.
pub(crate) async fn forward(
    state: &Arc<GatewayState>,
    table: &Arc<Table>,
    upstream: &dyn Upstream,
    admitted: Admitted,
) -> Response {
    let Admitted {
        req,
        arrived,
        permit,
    } = admitted;
    let config = &table.config;
    let mut attempts = Attempts::default();
    for attempt in 0..config.retry_attempts {
        let decided_at = Utc::now();
        let choice = match state.select(table, &req, &attempts.tried) {
            Ok(c) => c,
            Err(e) if attempts.last_error.is_none() => return rejected(state, table, &req, e),
            Err(_) => break,
        };
        let pool = &table.pools[choice.pool];
        let Some(endpoint) = choice.endpoint.clone() else {
            break;
        };
        if attempt > 0 {
            state.metrics.retries.inc();
            tokio::time::sleep(backoff(config.retry_backoff, attempt)).await;
        }
        attempts.begin(state, pool, &endpoint);
        if !endpoint.health.try_acquire(Instant::now()) {
            continue;
        }
        let mut in_flight = InFlight::new(endpoint.clone(), req.prompt_tokens, req.output_tokens);
        let answer = match send(upstream, table, pool, &endpoint, &req).await {
            Ok(a) => {
                in_flight.first_byte();
                a
            }
            Err(e) => {
                endpoint.health.on_failure(Instant::now());
                tracing::debug!(request = %req.id, error = %e, "attempt failed before the first byte");
                let retry = e.retryable;
                attempts.last_error = Some(e);
                if retry {
                    continue;
                }
                break;
            }
        };
        endpoint.health.on_success();
        let done = done(&req, &choice, endpoint, arrived, decided_at);
        let route = route_header(pool, &done.endpoint, &done.reason, &choice.targets, attempt);
        let out = match answer {
            Answer::Stream { head, first, rest } => {
                let on_events = in_flight.on_events(req.api);
                let on_end =
                    on_stream_end(state, table, done, arrived.elapsed(), (in_flight, permit));
                let mut relay = Relay::new(
                    first,
                    rest,
                    pool.config.idle_timeout,
                    !req.client_usage,
                    on_end,
                );
                if let Some(on_events) = on_events {
                    relay = relay.with_on_events(on_events);
                }
                respond(head, Body::from_stream(relay), route, true)
            }
            Answer::Whole { head, body } => {
                drop(in_flight);
                let seen = whole_seen(head.status, &body, req.output_tokens, arrived.elapsed());
                account(state, table, &done, seen);
                let out = respond(head, Body::from(body), route, false);
                drop(permit);
                out
            }
        };
        return with_id(out, &req.id);
    }
    all_failed(state, table, &req, attempts.last_error)
}

/// The wait before attempt `attempt` (from 1): `base`, doubling each time.
fn backoff(base: Duration, attempt: u32) -> Duration {
    base * 2u32.saturating_pow(attempt - 1)
}

/// One attempt's send phase: the request to `endpoint`, then the first chunk of a stream or the whole
/// of any other answer. Every failure here happens before a byte reached the client.
async fn send(
    upstream: &dyn Upstream,
    table: &Table,
    pool: &Pool,
    endpoint: &Endpoint,
    req: &Prepared,
) -> Result<Answer, UpstreamError> {
    let response = upstream
        .send(pool.target(endpoint), req.api.path(), req.body.clone())
        .await?;
    let head = Head {
        status: response.status,
        content_type: response.content_type.clone(),
    };
    let idle = pool.config.idle_timeout;
    let name = &endpoint.config.name;
    if req.stream && head.status.is_success() {
        let mut rest = response.body;
        return match tokio::time::timeout(idle, rest.next()).await {
            Ok(Some(Ok(first))) => Ok(Answer::Stream { head, first, rest }),
            _ => Err(UpstreamError {
                source: ErrorSource::Upstream,
                retryable: true,
                status: Some(head.status),
                message: format!("{name}: stream ended before its first byte"),
            }),
        };
    }
    let limit = table.config.max_body_bytes.max(16 << 20);
    let body = upstream::read_all(response, idle, limit, name).await?;
    Ok(Answer::Whole { head, body })
}

/// What the accounting of `req`, answered by `endpoint` as `choice` decided at `decided_at` (the
/// request having arrived at `arrived`), needs.
fn done(
    req: &Prepared,
    choice: &Choice,
    endpoint: Arc<Endpoint>,
    arrived: Instant,
    decided_at: DateTime<Utc>,
) -> Done {
    Done {
        id: req.id.clone(),
        class: req.class,
        pool: choice.pool,
        endpoint,
        reason: reason_codes(&choice.decision),
        predicted: choice.decision.predicted(),
        raw: choice.decision.raw,
        planned_output: req.output_tokens,
        others: choice.others.clone(),
        arrived,
        decided_at,
        prompt_estimate: req.prompt_tokens,
    }
}

/// The accounting a relayed stream runs once it ends; `keep` (the in-flight count and the slot) lives
/// until then.
fn on_stream_end(
    state: &Arc<GatewayState>,
    table: &Arc<Table>,
    done: Done,
    ttft: Duration,
    keep: (InFlight, OwnedSemaphorePermit),
) -> impl FnOnce(StreamSummary) + Send + Unpin + 'static {
    let (state, table) = (state.clone(), table.clone());
    move |s: StreamSummary| {
        let _keep = keep;
        let e2e = s.last_at.saturating_duration_since(done.arrived);
        let outcome = match s.end {
            StreamEnd::Complete => "ok",
            StreamEnd::UpstreamFailed => {
                done.endpoint.health.on_failure(Instant::now());
                "stream_error"
            }
            StreamEnd::ClientGone => "client_gone",
        };
        let seen = Seen {
            outcome,
            usage: s.usage,
            output_estimate: s.events.saturating_sub(1),
            ttft: Some(ttft),
            e2e,
        };
        account(&state, &table, &done, seen);
    }
}

/// What a whole answer showed: its usage when it succeeded, else no tokens.
fn whole_seen(status: StatusCode, body: &[u8], output_tokens: u32, e2e: Duration) -> Seen {
    let ok = status.is_success();
    let usage = if ok {
        serde_json::from_slice::<Value>(body)
            .ok()
            .as_ref()
            .and_then(upstream::usage_of)
    } else {
        None
    };
    Seen {
        outcome: if ok { "ok" } else { "upstream_4xx" },
        usage,
        output_estimate: if ok { u64::from(output_tokens) } else { 0 },
        ttft: None,
        e2e,
    }
}

/// The client's response: the upstream's status and content type (SSE or JSON when it sent none),
/// `x-strata-route`, and no caching of streams.
fn respond(head: Head, body: Body, route: HeaderValue, streamed: bool) -> Response {
    let default_type = if streamed {
        "text/event-stream"
    } else {
        "application/json"
    };
    let mut out = Response::new(body);
    *out.status_mut() = head.status;
    let h = out.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        head.content_type
            .unwrap_or_else(|| HeaderValue::from_static(default_type)),
    );
    if streamed {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    h.insert(HeaderName::from_static(ROUTE_HEADER), route);
    out
}

/// A request that no pool would take (budget, plan or no healthy upstream).
fn rejected(state: &GatewayState, table: &Table, req: &Prepared, e: ApiError) -> Response {
    let class = &table.config.classes[req.class].name;
    let outcome = if e.status == StatusCode::TOO_MANY_REQUESTS {
        "rejected"
    } else {
        "no_upstream"
    };
    state
        .metrics
        .requests
        .with_label_values(&["none", class, outcome])
        .inc();
    with_id(e.into_response(), &req.id)
}

/// A 502 after every attempt failed, naming the last failure.
fn all_failed(
    state: &GatewayState,
    table: &Table,
    req: &Prepared,
    last_error: Option<UpstreamError>,
) -> Response {
    let class = &table.config.classes[req.class].name;
    state
        .metrics
        .requests
        .with_label_values(&["none", class, "upstream_error"])
        .inc();
    let message = match &last_error {
        Some(e) => format!("Every upstream attempt failed; last: {}", e.message),
        None => "No upstream endpoint could take the request".to_owned(),
    };
    let mut e = ApiError {
        status: StatusCode::BAD_GATEWAY,
        kind: "server_error",
        ..ApiError::invalid(message)
    };
    e.code = Some("upstream_error");
    with_id(e.into_response(), &req.id)
}

/// `x-strata-route`: the pool and endpoint, the reasons, the targets that applied and the attempt.
fn route_header(
    pool: &Pool,
    endpoint: &Endpoint,
    reason: &str,
    targets: &str,
    attempt: u32,
) -> HeaderValue {
    let text = format!(
        "pool={}; endpoint={}; reason={}; targets={}; attempt={}",
        pool.config.name,
        endpoint.config.name,
        if reason.is_empty() { "none" } else { reason },
        targets,
        attempt + 1
    );
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("unprintable"))
}

fn with_id(mut response: Response, id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(id) {
        response
            .headers_mut()
            .insert(HeaderName::from_static(REQUEST_ID_HEADER), v);
    }
    response
}

/// Counts a request in flight on an endpoint while it lives, and its prompt tokens among those ahead
/// of a new request's until its first byte comes back; tells the endpoint's mirror the same.
struct InFlight {
    endpoint: Arc<Endpoint>,
    prompt_tokens: u32,
    twin: Option<TwinKey>,
}

impl InFlight {
    fn new(endpoint: Arc<Endpoint>, prompt_tokens: u32, output_tokens: u32) -> Self {
        let health = &endpoint.health;
        health.in_flight.fetch_add(1, Ordering::Relaxed);
        health
            .prompt_tokens_ahead
            .fetch_add(prompt_tokens, Ordering::Relaxed);
        let twin = endpoint
            .twin
            .as_ref()
            .map(|t| t.admit(Instant::now(), prompt_tokens, output_tokens));
        Self {
            endpoint,
            prompt_tokens,
            twin,
        }
    }

    /// The answer's first byte is back: its prompt is no longer ahead of anyone's.
    fn first_byte(&mut self) {
        let tokens = std::mem::take(&mut self.prompt_tokens);
        if tokens == 0 {
            return;
        }
        self.endpoint
            .health
            .prompt_tokens_ahead
            .fetch_sub(tokens, Ordering::Relaxed);
        if let (Some(twin), Some(key)) = (&self.endpoint.twin, self.twin) {
            twin.first_byte(key, Instant::now());
        }
    }

    /// What tells the endpoint's mirror how many tokens the stream has shown (a chat stream's first
    /// event names the role; every other event before the end carries about one token); none
    /// without a mirror.
    fn on_events(&self, api: Api) -> Option<OnEvents> {
        let key = self.twin?;
        let endpoint = self.endpoint.clone();
        let role_events = u64::from(api == Api::Chat);
        Some(Box::new(move |events| {
            if let Some(twin) = &endpoint.twin {
                twin.tokens_seen(key, Instant::now(), events.saturating_sub(role_events));
            }
        }))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.first_byte();
        self.endpoint
            .health
            .in_flight
            .fetch_sub(1, Ordering::Relaxed);
        if let (Some(twin), Some(key)) = (&self.endpoint.twin, self.twin) {
            twin.ended(key, Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::gateway::{
        testing::{LAX, config, cpu_pool, gpu_pool, request},
        upstream::{BodyError, Target, UpstreamResponse},
    };

    /// An upstream that answers by endpoint name and records whom it was sent to.
    struct Fake {
        answer: fn(&str) -> Result<UpstreamResponse, UpstreamError>,
        calls: Mutex<Vec<String>>,
    }

    impl Fake {
        fn new(answer: fn(&str) -> Result<UpstreamResponse, UpstreamError>) -> Self {
            Self {
                answer,
                calls: Mutex::new(Vec::new()),
            }
        }

        fn calls(&self) -> Vec<String> {
            self.calls.lock().expect("calls").clone()
        }
    }

    #[async_trait]
    impl Upstream for Fake {
        async fn send(
            &self,
            to: Target<'_>,
            _path: &'static str,
            _body: Bytes,
        ) -> Result<UpstreamResponse, UpstreamError> {
            self.calls
                .lock()
                .expect("calls")
                .push(to.endpoint.name.clone());
            (self.answer)(&to.endpoint.name)
        }
    }

    fn failure(message: &str, status: Option<StatusCode>) -> UpstreamError {
        UpstreamError {
            source: ErrorSource::Upstream,
            retryable: true,
            status,
            message: message.to_owned(),
        }
    }

    fn answer(chunks: Vec<Result<Bytes, BodyError>>) -> UpstreamResponse {
        UpstreamResponse {
            status: StatusCode::OK,
            content_type: None,
            body: Box::pin(futures_util::stream::iter(chunks)),
        }
    }

    async fn run(
        config: crate::gateway::config::GatewayConfig,
        stream: bool,
        fake: &Fake,
    ) -> (Arc<GatewayState>, Response) {
        let state = GatewayState::new(config, None, None).expect("state");
        let table = state.table();
        let admitted = Admitted {
            req: request(LAX, stream),
            arrived: Instant::now(),
            permit: state.try_slot().expect("a slot"),
        };
        let response = forward(&state, &table, fake, admitted).await;
        (state, response)
    }

    async fn text(response: Response) -> String {
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("a body");
        String::from_utf8_lossy(&body).into_owned()
    }

    #[tokio::test]
    async fn a_connect_error_on_the_cpu_endpoint_fails_over_to_the_gpu_once() {
        let pools = format!(
            "{}{}",
            cpu_pool("cpu", 1e5, &["http://127.0.0.1:1"]),
            gpu_pool(&["http://127.0.0.1:3"])
        );
        let fake = Fake::new(|name| match name {
            "127.0.0.1:1" => Err(failure("127.0.0.1:1: cannot connect", None)),
            _ => Ok(answer(vec![Ok(Bytes::from_static(
                br#"{"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
            ))])),
        });
        let (state, response) = run(config(&pools, 4, 1), false, &fake).await;
        assert_eq!(response.status(), StatusCode::OK);
        let route = response.headers()[ROUTE_HEADER].to_str().expect("text");
        assert!(
            route.contains("pool=gpu") && route.contains("attempt=2"),
            "{route}"
        );
        assert_eq!(fake.calls(), ["127.0.0.1:1", "127.0.0.1:3"]);
        assert_eq!(state.metrics.failovers.get(), 1);
        assert_eq!(state.metrics.retries.get(), 1);
    }

    #[tokio::test]
    async fn a_failure_after_the_first_byte_of_a_stream_is_not_retried() {
        let cpu = cpu_pool("cpu", 1e5, &["http://127.0.0.1:1", "http://127.0.0.1:2"]);
        let fake = Fake::new(|_| {
            Ok(answer(vec![
                Ok(Bytes::from_static(
                    b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
                )),
                Err(BodyError),
            ]))
        });
        let (state, response) = run(config(&cpu, 4, 1), true, &fake).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-cache");
        let body = text(response).await;
        assert!(body.starts_with("data: {\"choices\""), "{body}");
        assert!(body.ends_with(std::str::from_utf8(upstream::STREAM_ERROR_EVENT).expect("text")));
        assert_eq!(fake.calls().len(), 1, "one attempt: {:?}", fake.calls());
        assert_eq!(state.metrics.retries.get(), 0);
    }

    #[tokio::test]
    async fn retries_stop_at_the_configured_count_with_doubling_backoff() {
        let urls: Vec<String> = (1..=5).map(|p| format!("http://127.0.0.1:{p}")).collect();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        let fake = Fake::new(|name| {
            Err(failure(
                &format!("{name}: answered 503"),
                Some(StatusCode::SERVICE_UNAVAILABLE),
            ))
        });
        let started = Instant::now();
        let (state, response) =
            run(config(&cpu_pool("cpu", 1e5, &urls), 3, 20), false, &fake).await;
        assert!(
            started.elapsed() >= Duration::from_millis(20 + 40),
            "backoff 20 ms then 40 ms: {:?}",
            started.elapsed()
        );
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(response.headers()[REQUEST_ID_HEADER], "req-1");
        assert_eq!(fake.calls().len(), 3, "{:?}", fake.calls());
        assert_eq!(state.metrics.retries.get(), 2);
        assert!(text(response).await.contains("answered 503"));
    }

    #[test]
    fn the_backoff_doubles_from_the_base() {
        let base = Duration::from_millis(10);
        let waits: Vec<Duration> = (1..=4).map(|a| backoff(base, a)).collect();
        assert_eq!(waits, [10, 20, 40, 80].map(Duration::from_millis));
    }
}
