//! Talking to upstreams: the [`Upstream`] the proxy sends through and [`Http`], its reqwest
//! implementation (one client per pool, a time limit to the response head), classification of failures
//! as retryable or not, and the streaming relay that passes server-sent events through chunk by chunk.
//!
//! The relay never buffers a stream: an upstream chunk is forwarded as soon as it arrives. It only holds
//! back the bytes of an event that is cut across two chunks, and only when it has to look inside events
//! (a chunk that mentions `"usage"`, or one that does not end on an event boundary).

use std::{
    convert::Infallible,
    pin::Pin,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use async_trait::async_trait;
use axum::{body::Bytes, http::HeaderValue};
use futures_util::{Stream, StreamExt};
use reqwest::StatusCode;

use super::config::EndpointConfig;

/// Which side a failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorSource {
    /// The upstream failed, timed out or answered 5xx/429.
    Upstream,
    /// The client sent something wrong or went away.
    Downstream,
    /// A failure of the gateway itself.
    Internal,
}

/// An upstream call that failed.
#[derive(Debug, Clone)]
pub struct UpstreamError {
    /// Which side.
    pub source: ErrorSource,
    /// True when the same request may go to another endpoint (nothing reached the client yet).
    pub retryable: bool,
    /// The upstream's status, if it answered.
    pub status: Option<StatusCode>,
    /// What happened (no keys, no bodies).
    pub message: String,
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UpstreamError {}

impl UpstreamError {
    fn upstream(message: impl Into<String>, status: Option<StatusCode>) -> Self {
        Self {
            source: ErrorSource::Upstream,
            retryable: true,
            status,
            message: message.into(),
        }
    }
}

/// A body chunk that did not arrive: the connection broke or the upstream cut the body off.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the upstream body broke off")]
pub struct BodyError;

/// An upstream body, chunk by chunk.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, BodyError>> + Send>>;

/// An upstream's answer whose head arrived: its body is still to be read.
pub struct UpstreamResponse {
    /// The upstream's status (never 5xx or 429: those are errors).
    pub status: StatusCode,
    /// Its `content-type`, if it sent one.
    pub content_type: Option<HeaderValue>,
    /// The body.
    pub body: BodyStream,
}

impl std::fmt::Debug for UpstreamResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamResponse")
            .field("status", &self.status)
            .field("content_type", &self.content_type)
            .finish_non_exhaustive()
    }
}

/// Where one attempt goes: an endpoint, over its pool's connections.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The pool's client (its connection pool and connect timeout).
    pub client: &'a reqwest::Client,
    /// The endpoint.
    pub endpoint: &'a EndpointConfig,
    /// How long to wait for the response head.
    pub first_byte: Duration,
}

/// Sends a request body to an endpoint and returns the answer's head; the proxy's only way out.
#[async_trait]
pub trait Upstream: Send + Sync {
    /// POSTs `body` to `path` on `to.endpoint`.
    ///
    /// # Errors
    /// An [`UpstreamError`] when the endpoint cannot be reached, is too slow or answers 5xx/429.
    async fn send(
        &self,
        to: Target<'_>,
        path: &'static str,
        body: Bytes,
    ) -> Result<UpstreamResponse, UpstreamError>;
}

/// The real upstream: HTTP over the pool's reqwest client.
#[derive(Debug, Clone, Copy, Default)]
pub struct Http;

#[async_trait]
impl Upstream for Http {
    async fn send(
        &self,
        to: Target<'_>,
        path: &'static str,
        body: Bytes,
    ) -> Result<UpstreamResponse, UpstreamError> {
        let response = post(to.client, to.endpoint, path, body, to.first_byte).await?;
        Ok(UpstreamResponse {
            status: response.status(),
            content_type: response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .cloned(),
            body: Box::pin(response.bytes_stream().map(|r| r.map_err(|_| BodyError))),
        })
    }
}

/// Builds the client of one pool.
///
/// # Errors
/// When reqwest cannot build a client.
pub fn client(connect_timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(1024)
        .tcp_nodelay(true)
        .build()
}

/// Sends `body` to `endpoint + path` and waits at most `first_byte` for the response head. 5xx and 429
/// answers, connection failures and timeouts are retryable errors; other answers are returned as they are.
///
/// # Errors
/// An [`UpstreamError`] as above.
async fn post(
    client: &reqwest::Client,
    endpoint: &EndpointConfig,
    path: &str,
    body: Bytes,
    first_byte: Duration,
) -> Result<reqwest::Response, UpstreamError> {
    let mut request = client
        .post(format!("{}{path}", endpoint.url))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(key) = &endpoint.api_key {
        request = request.bearer_auth(key);
    }
    let response = match tokio::time::timeout(first_byte, request.send()).await {
        Err(_) => {
            return Err(UpstreamError::upstream(
                format!("{}: no answer within {first_byte:?}", endpoint.name),
                None,
            ));
        }
        Ok(Err(e)) => {
            let what = if e.is_connect() {
                "cannot connect"
            } else {
                "request failed"
            };
            return Err(UpstreamError::upstream(
                format!("{}: {what}", endpoint.name),
                None,
            ));
        }
        Ok(Ok(r)) => r,
    };
    let status = response.status();
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        return Err(UpstreamError::upstream(
            format!("{}: answered {status}", endpoint.name),
            Some(status),
        ));
    }
    Ok(response)
}

/// Reads a whole (non-streamed) body, each chunk within `idle`, at most `limit` bytes. Failures are
/// retryable: nothing has reached the client yet.
///
/// # Errors
/// An [`UpstreamError`] when the body fails, stalls or is too large.
pub async fn read_all(
    response: UpstreamResponse,
    idle: Duration,
    limit: usize,
    name: &str,
) -> Result<Bytes, UpstreamError> {
    let status = response.status;
    let mut stream = response.body;
    let mut first: Option<Bytes> = None;
    let mut rest: Vec<u8> = Vec::new();
    loop {
        match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => {
                return Err(UpstreamError::upstream(
                    format!("{name}: body stalled"),
                    Some(status),
                ));
            }
            Ok(Some(Err(_))) => {
                return Err(UpstreamError::upstream(
                    format!("{name}: body cut off"),
                    Some(status),
                ));
            }
            Ok(None) => break,
            Ok(Some(Ok(chunk))) => match &first {
                None if rest.is_empty() => first = Some(chunk),
                _ => {
                    if let Some(f) = first.take() {
                        rest.extend_from_slice(&f);
                    }
                    rest.extend_from_slice(&chunk);
                    if rest.len() > limit {
                        return Err(UpstreamError {
                            retryable: false,
                            ..UpstreamError::upstream(
                                format!("{name}: answer over {limit} bytes"),
                                Some(status),
                            )
                        });
                    }
                }
            },
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(rest)))
}

/// Tokens reported in an OpenAI `usage` object: (prompt, completion).
pub fn usage_of(v: &serde_json::Value) -> Option<(u64, u64)> {
    let u = v.get("usage")?;
    Some((
        u.get("prompt_tokens")?.as_u64()?,
        u.get("completion_tokens")?.as_u64()?,
    ))
}

/// How a relayed stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// The upstream finished.
    Complete,
    /// The upstream failed or stalled mid-stream; the client got an error event.
    UpstreamFailed,
    /// The client went away.
    ClientGone,
}

/// What a relay saw.
#[derive(Debug, Clone, Copy)]
pub struct StreamSummary {
    /// How it ended.
    pub end: StreamEnd,
    /// Usage reported by the upstream: (prompt, completion).
    pub usage: Option<(u64, u64)>,
    /// Events relayed (a fallback estimate of output tokens: one token per content event).
    pub events: u64,
    /// When the first content event arrived.
    pub first_at: Option<Instant>,
    /// When the last byte arrived.
    pub last_at: Instant,
}

/// The event sent when the upstream fails mid-stream.
pub const STREAM_ERROR_EVENT: &[u8] = b"data: {\"error\":{\"message\":\"The upstream failed during the answer\",\"type\":\"server_error\",\"param\":null,\"code\":\"upstream_error\"}}\n\n";

/// Called with the count of events relayed so far, each time a chunk brings more.
pub type OnEvents = Box<dyn FnMut(u64) + Send>;

/// Relays an upstream SSE body to the client chunk by chunk; reads `usage` on the way, drops the usage
/// event the gateway asked for on the client's behalf, tells an [`OnEvents`] hook how far the stream
/// has come, and calls `on_end` once, however the stream ends.
pub struct Relay<F: FnOnce(StreamSummary) + Send + Unpin> {
    inner: BodyStream,
    first: Option<Bytes>,
    idle: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    carry: Vec<u8>,
    drop_usage: bool,
    summary: StreamSummary,
    done: bool,
    on_events: Option<OnEvents>,
    on_end: Option<F>,
}

impl<F: FnOnce(StreamSummary) + Send + Unpin> Relay<F> {
    /// A relay of `inner` whose first chunk `first` was already read.
    pub fn new(
        first: Bytes,
        inner: BodyStream,
        idle: Duration,
        drop_usage: bool,
        on_end: F,
    ) -> Self {
        let now = Instant::now();
        Self {
            inner,
            first: Some(first),
            idle,
            sleep: Box::pin(tokio::time::sleep(idle)),
            carry: Vec::new(),
            drop_usage,
            summary: StreamSummary {
                end: StreamEnd::ClientGone,
                usage: None,
                events: 0,
                first_at: Some(now),
                last_at: now,
            },
            done: false,
            on_events: None,
            on_end: Some(on_end),
        }
    }

    /// The same relay, calling `on_events` as events come.
    #[must_use]
    pub fn with_on_events(mut self, on_events: OnEvents) -> Self {
        self.on_events = Some(on_events);
        self
    }

    fn finish(&mut self, end: StreamEnd) {
        self.done = true;
        self.summary.end = end;
        self.summary.last_at = Instant::now();
        if let Some(f) = self.on_end.take() {
            f(self.summary);
        }
    }

    /// Looks at one complete event; false drops it.
    fn inspect(&mut self, event: &[u8]) -> bool {
        self.summary.events += 1;
        if !contains(event, b"\"usage\"") {
            return true;
        }
        let Some(data) = event.split(|&b| b == b'\n').find_map(|l| {
            l.strip_prefix(b"data: ")
                .or_else(|| l.strip_prefix(b"data:"))
        }) else {
            return true;
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
            return true;
        };
        if let Some(u) = usage_of(&v) {
            self.summary.usage = Some(u);
            let no_choices = v["choices"].as_array().is_some_and(Vec::is_empty);
            if self.drop_usage && no_choices {
                self.summary.events -= 1;
                return false;
            }
        }
        true
    }

    fn process(&mut self, chunk: Bytes) -> Option<Bytes> {
        let before = self.summary.events;
        let out = self.split(chunk);
        if self.summary.events > before
            && let Some(f) = &mut self.on_events
        {
            f(self.summary.events);
        }
        out
    }

    /// The complete events of `chunk` (and of what earlier chunks left), to relay.
    fn split(&mut self, chunk: Bytes) -> Option<Bytes> {
        if self.carry.is_empty() && chunk.ends_with(b"\n\n") && !contains(&chunk, b"\"usage\"") {
            self.summary.events += count(&chunk, b"\n\n");
            return Some(chunk);
        }
        self.carry.extend_from_slice(&chunk);
        let end = rfind(&self.carry, b"\n\n")?;
        let complete: Vec<u8> = self.carry.drain(..end + 2).collect();
        let mut out = Vec::with_capacity(complete.len());
        for event in complete.split_inclusive_events() {
            if self.inspect(event) {
                out.extend_from_slice(event);
            }
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }
}

trait Events {
    fn split_inclusive_events(&self) -> Vec<&[u8]>;
}

impl Events for Vec<u8> {
    fn split_inclusive_events(&self) -> Vec<&[u8]> {
        let mut events = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i + 1 < self.len() {
            if self[i] == b'\n' && self[i + 1] == b'\n' {
                events.push(&self[start..i + 2]);
                start = i + 2;
                i += 2;
            } else {
                i += 1;
            }
        }
        if start < self.len() {
            events.push(&self[start..]);
        }
        events
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn count(haystack: &[u8], needle: &[u8]) -> u64 {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count() as u64
}

fn rfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

impl<F: FnOnce(StreamSummary) + Send + Unpin> Stream for Relay<F> {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(first) = this.first.take()
            && let Some(out) = this.process(first)
        {
            return Poll::Ready(Some(Ok(out)));
        }
        loop {
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    let deadline = tokio::time::Instant::now() + this.idle;
                    this.sleep.as_mut().reset(deadline);
                    this.summary.last_at = Instant::now();
                    if let Some(out) = this.process(chunk) {
                        return Poll::Ready(Some(Ok(out)));
                    }
                }
                Poll::Ready(Some(Err(_))) => {
                    this.finish(StreamEnd::UpstreamFailed);
                    return Poll::Ready(Some(Ok(Bytes::from_static(STREAM_ERROR_EVENT))));
                }
                Poll::Ready(None) => {
                    let rest = std::mem::take(&mut this.carry);
                    this.finish(StreamEnd::Complete);
                    return if rest.is_empty() {
                        Poll::Ready(None)
                    } else {
                        Poll::Ready(Some(Ok(Bytes::from(rest))))
                    };
                }
                Poll::Pending => {
                    if this.sleep.as_mut().poll(cx).is_ready() {
                        this.finish(StreamEnd::UpstreamFailed);
                        return Poll::Ready(Some(Ok(Bytes::from_static(STREAM_ERROR_EVENT))));
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl<F: FnOnce(StreamSummary) + Send + Unpin> Drop for Relay<F> {
    fn drop(&mut self) {
        if !self.done {
            self.finish(StreamEnd::ClientGone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    async fn relay(chunks: Vec<&'static str>, drop_usage: bool) -> (String, StreamSummary) {
        relay_counting(chunks, drop_usage).await.0
    }

    /// As [`relay`], with the counts the relay's [`OnEvents`] hook was called with.
    async fn relay_counting(
        chunks: Vec<&'static str>,
        drop_usage: bool,
    ) -> ((String, StreamSummary), Vec<u64>) {
        let counts = Arc::new(Mutex::new(Vec::new()));
        let c2 = counts.clone();
        let seen = Arc::new(Mutex::new(None));
        let s2 = seen.clone();
        let mut it = chunks
            .into_iter()
            .map(|c| Ok::<_, BodyError>(Bytes::from_static(c.as_bytes())));
        let first = it.next().and_then(Result::ok).unwrap_or_default();
        let r = Relay::new(
            first,
            Box::pin(futures_util::stream::iter(it.collect::<Vec<_>>())),
            Duration::from_secs(5),
            drop_usage,
            move |s| *s2.lock().unwrap() = Some(s),
        )
        .with_on_events(Box::new(move |n| c2.lock().unwrap().push(n)));
        let out: Vec<_> = r.map(|b| b.unwrap()).collect().await;
        let text = out
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        let summary = seen.lock().unwrap().expect("on_end ran");
        let counts = counts.lock().unwrap().clone();
        ((text, summary), counts)
    }

    /// The hook hears of every chunk that completes events, with the count so far: not of the
    /// half-event a chunk ends with, nor of the usage event dropped.
    #[tokio::test]
    async fn tells_the_events_hook_how_far_the_stream_has_come() {
        let chunks = vec![
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: {\"cho",
            "ices\":[{\"delta\":{\"content\":\"c\"}}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":3,\"total_tokens\":6}}\n\n",
            "data: [DONE]\n\n",
        ];
        let ((_, s), counts) = relay_counting(chunks, true).await;
        assert_eq!(counts, vec![1, 2, 3, 4]);
        assert_eq!(s.events, 4);
    }

    #[tokio::test]
    async fn passes_events_and_drops_the_injected_usage_event() {
        let chunks = vec![
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: {\"cho",
            "ices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\n\n",
            "data: [DONE]\n\n",
        ];
        let (text, s) = relay(chunks.clone(), true).await;
        assert_eq!(s.usage, Some((3, 2)));
        assert_eq!(s.end, StreamEnd::Complete);
        assert!(!text.contains("prompt_tokens"), "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"));
        let (text, _) = relay(chunks, false).await;
        assert!(
            text.contains("\"prompt_tokens\":3"),
            "kept when the client asked: {text}"
        );
    }
}
