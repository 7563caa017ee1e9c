//! The engine's OpenAI-compatible HTTP server: `/v1/chat/completions`, `/v1/completions` (JSON or
//! server-sent events), `/v1/models`, `/health`, Prometheus `/metrics` and the step timings `/steps`
//! (JSON sums by what each step ran, from which a service-time model is fitted), in front of one
//! continuous-batching [`Engine`]. A client that disconnects cancels its request. Serve the router
//! with [`crate::listener::serve`], which holds the connection timeouts and limits.

mod api;
mod metrics;
mod reply;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use axum::{
    Json, Router,
    body::{Body, to_bytes},
    extract::{Request, State},
    http::{HeaderMap, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response, Sse, sse::KeepAlive},
    routing::{get, post},
};
use serde_json::json;
use strata_engine::{
    chat::ChatTemplate,
    sampling::SamplingParams,
    serve::{DEFAULT_PRIORITY, Engine, Event, EventSink, Priority, SubmitError},
};
use tokio::sync::mpsc;

use crate::openai_error::ApiError;
use api::{ChatRequest, CompletionRequest, Prompt};
use reply::{Endpoint, ReplyContext};

/// The request header that picks a priority class: `high`, `normal`, `low`, or a number (0 is most
/// urgent).
pub const PRIORITY_HEADER: &str = "x-strata-priority";

/// How the server presents itself.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The model name clients send and `/v1/models` lists.
    pub served_model: String,
    /// When set, `/v1/*` requires `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// How the engine's threads are placed, as reported by `/health`.
    pub placement: String,
}

impl ServerOptions {
    /// Options for `served_model` with no key and a 4 MiB body limit.
    pub fn new(served_model: impl Into<String>) -> Self {
        Self {
            served_model: served_model.into(),
            api_key: None,
            max_body_bytes: 4 << 20,
            placement: "none".into(),
        }
    }
}

/// What every handler shares.
pub(crate) struct ServerState {
    engine: Arc<Engine>,
    options: ServerOptions,
    metrics: metrics::Metrics,
    template: ChatTemplate,
    fingerprint: String,
    ids: AtomicU64,
    started: u64,
}

impl ServerState {
    fn next_id(&self) -> String {
        format!(
            "{:x}{:06x}",
            self.started,
            self.ids.fetch_add(1, Ordering::Relaxed)
        )
    }
}

/// Errors building the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The model's chat template does not compile.
    #[error("the model's chat template: {0}")]
    Template(#[from] strata_engine::Error),
    /// Metrics could not be registered.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// The server's routes over `engine`.
///
/// # Errors
/// When the model's chat template does not compile.
pub fn router(engine: Arc<Engine>, options: ServerOptions) -> Result<Router, ServerError> {
    let tokenizer = &engine.model().tokenizer;
    let template = match tokenizer.chat_template() {
        Some(source) => ChatTemplate::new(source)?,
        None => ChatTemplate::fallback_chatml(),
    };
    let model = &engine.model().model;
    let fingerprint = format!(
        "strata-{}-{}-{}t",
        env!("CARGO_PKG_VERSION"),
        model.weight_type(),
        model.threads()
    );
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let state = Arc::new(ServerState {
        metrics: metrics::Metrics::new(engine.stats().clone())?,
        engine,
        options,
        template,
        fingerprint,
        ids: AtomicU64::new(0),
        started,
    });
    let v1 = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .layer(middleware::from_fn_with_state(state.clone(), require_key));
    Ok(Router::new()
        .merge(v1)
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .route("/steps", get(step_times))
        .fallback(not_found)
        .method_not_allowed_fallback(ApiError::method_not_allowed)
        .with_state(state))
}

async fn require_key(
    State(state): State<Arc<ServerState>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(key) = &state.options.api_key {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !constant_time_eq(given.as_bytes(), key.as_bytes()) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

/// Compares without an early exit, so timing does not reveal how much of a key matched.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for (i, &x) in a.iter().enumerate() {
        diff |= x ^ b.get(i % b.len().max(1)).copied().unwrap_or(0);
    }
    diff == 0
}

async fn not_found() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        ..ApiError::invalid("Unknown route; see /v1/chat/completions, /v1/completions, /v1/models")
    }
}

async fn health(State(state): State<Arc<ServerState>>) -> impl IntoResponse {
    let stats = state.engine.stats();
    let model = &state.engine.model().model;
    let tier = strata_engine::kernels::cpu::tier().map_or("unknown", |t| t.name());
    Json(json!({
        "status": "ok",
        "model": state.options.served_model,
        "weights": model.weight_mix().to_string(),
        "threads": model.threads(),
        "kernel_tier": tier,
        "placement": state.options.placement,
        "max_batch": state.engine.config().max_batch,
        "kv_blocks": state.engine.kv_blocks(),
        "waiting": stats.waiting.load(Ordering::Relaxed),
        "running": stats.running.load(Ordering::Relaxed),
    }))
}

async fn metrics_text(State(state): State<Arc<ServerState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}

async fn step_times(State(state): State<Arc<ServerState>>) -> impl IntoResponse {
    Json(state.engine.stats().step_times())
}

async fn models(State(state): State<Arc<ServerState>>) -> impl IntoResponse {
    let model = &state.engine.model().model;
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.options.served_model,
            "object": "model",
            "created": state.started,
            "owned_by": "strata",
            "context_length": model.config().context_length,
            "weights": model.weight_mix().to_string(),
        }],
    }))
}

async fn chat_completions(
    State(state): State<Arc<ServerState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let arrived = Instant::now();
    let answer = chat_inner(state.clone(), &headers, body, arrived).await;
    finish(&state, Endpoint::Chat, answer)
}

async fn completions(
    State(state): State<Arc<ServerState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let arrived = Instant::now();
    let answer = completion_inner(state.clone(), &headers, body, arrived).await;
    finish(&state, Endpoint::Completions, answer)
}

fn finish(state: &ServerState, endpoint: Endpoint, answer: Result<Response, ApiError>) -> Response {
    let response = answer.unwrap_or_else(IntoResponse::into_response);
    state
        .metrics
        .requests
        .with_label_values(&[endpoint.label(), response.status().as_str()])
        .inc();
    response
}

async fn read_body(state: &ServerState, body: Body) -> Result<axum::body::Bytes, ApiError> {
    let limit = state.options.max_body_bytes;
    to_bytes(body, limit)
        .await
        .map_err(|e| ApiError::unreadable_body(e, limit))
}

fn check_model(state: &ServerState, model: &str) -> Result<(), ApiError> {
    if model != state.options.served_model {
        return Err(ApiError::model_not_found(
            model,
            &state.options.served_model,
        ));
    }
    Ok(())
}

fn priority(headers: &HeaderMap) -> Result<Priority, ApiError> {
    let Some(value) = headers.get(PRIORITY_HEADER) else {
        return Ok(DEFAULT_PRIORITY);
    };
    let text = value.to_str().unwrap_or("").trim().to_ascii_lowercase();
    match text.as_str() {
        "high" => Ok(0),
        "normal" => Ok(1),
        "low" => Ok(2),
        n => n.parse::<Priority>().map_err(|_| {
            ApiError::invalid(format!(
                "{PRIORITY_HEADER} must be high, normal, low or a number 0-255, got `{text}`"
            ))
        }),
    }
}

async fn chat_inner(
    state: Arc<ServerState>,
    headers: &HeaderMap,
    body: Body,
    arrived: Instant,
) -> Result<Response, ApiError> {
    let bytes = read_body(&state, body).await?;
    let request: ChatRequest = api::parse(&bytes)?;
    check_model(&state, &request.model)?;
    let messages = request.template_messages()?;
    let logprobs = request.logprobs()?;
    let text = state
        .template
        .render_prompt(&messages, true, &state.engine.model().tokenizer)
        .map_err(|e| ApiError::invalid_param("messages", e.to_string()))?;
    let prompt = tokenize(&state, &text, "messages")?;
    let max_tokens = resolve_max_tokens(&state, prompt.len(), request.max_tokens(), "messages")?;
    let params = request.sampling.to_params(max_tokens)?;
    let options = RunOptions {
        endpoint: Endpoint::Chat,
        arrived,
        include_usage: request
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage),
        logprobs,
        priority: priority(headers)?,
        ignore_eos: request.sampling.ignore_eos,
        stream: request.stream,
    };
    run(state, prompt, params, options).await
}

async fn completion_inner(
    state: Arc<ServerState>,
    headers: &HeaderMap,
    body: Body,
    arrived: Instant,
) -> Result<Response, ApiError> {
    let bytes = read_body(&state, body).await?;
    let request: CompletionRequest = api::parse(&bytes)?;
    check_model(&state, &request.model)?;
    request.check_unsupported()?;
    let logprobs = request.logprobs()?;
    let prompt = match &request.prompt {
        Prompt::Text(text) => tokenize(&state, text, "prompt")?,
        Prompt::Texts(texts) if texts.len() == 1 => tokenize(&state, &texts[0], "prompt")?,
        Prompt::Texts(texts) => {
            return Err(ApiError::invalid_param(
                "prompt",
                format!("prompt must hold one text, got {}", texts.len()),
            ));
        }
        Prompt::Tokens(ids) => ids.clone(),
    };
    if prompt.is_empty() {
        return Err(ApiError::invalid_param("prompt", "the prompt is empty"));
    }
    let vocab = state.engine.model().model.config().vocab_size;
    if let Some(bad) = prompt.iter().find(|&&t| t as usize >= vocab) {
        return Err(ApiError::invalid_param(
            "prompt",
            format!("token id {bad} is outside the vocabulary of {vocab} tokens"),
        ));
    }
    // The legacy endpoint's default is 16 tokens.
    let max_tokens = resolve_max_tokens(
        &state,
        prompt.len(),
        Some(request.max_tokens.unwrap_or(16) as usize),
        "prompt",
    )?;
    let params = request.sampling.to_params(max_tokens)?;
    let options = RunOptions {
        endpoint: Endpoint::Completions,
        arrived,
        include_usage: request
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage),
        logprobs,
        priority: priority(headers)?,
        ignore_eos: request.sampling.ignore_eos,
        stream: request.stream,
    };
    run(state, prompt, params, options).await
}

fn tokenize(state: &ServerState, text: &str, param: &str) -> Result<Vec<u32>, ApiError> {
    let ids = state
        .engine
        .model()
        .tokenizer
        .encode(text)
        .map_err(|e| ApiError::invalid_param(param, format!("cannot tokenize: {e}")))?;
    if ids.is_empty() {
        return Err(ApiError::invalid_param(
            param,
            format!("the {param} is empty"),
        ));
    }
    Ok(ids)
}

/// The tokens to generate: as asked, or what the context leaves; refused when prompt plus
/// `max_tokens` exceed the context.
fn resolve_max_tokens(
    state: &ServerState,
    prompt_len: usize,
    asked: Option<usize>,
    prompt_param: &str,
) -> Result<usize, ApiError> {
    let context = state.engine.model().model.config().context_length;
    let kv_positions = state.engine.kv_blocks() * state.engine.config().block_size;
    let room = context.min(kv_positions);
    let exceeded = |asked: usize| ApiError {
        code: Some("context_length_exceeded"),
        ..ApiError::invalid_param(
            if asked > 0 {
                "max_tokens"
            } else {
                prompt_param
            },
            format!(
                "This model's maximum context length is {room} tokens. However, you requested \
                 {} tokens ({prompt_len} in the messages, {asked} in the completion). Please \
                 reduce the length of the messages or completion.",
                prompt_len + asked
            ),
        )
    };
    if prompt_len >= room {
        return Err(exceeded(0));
    }
    match asked {
        Some(0) => Err(ApiError::invalid_param(
            "max_tokens",
            "max_tokens must be at least 1",
        )),
        Some(n) if prompt_len + n > room => Err(exceeded(n)),
        Some(n) => Ok(n),
        None => Ok(room - prompt_len),
    }
}

/// Sends engine events into a Tokio channel; a dropped receiver (client gone) cancels.
struct ChannelSink(mpsc::UnboundedSender<Event>);

impl EventSink for ChannelSink {
    fn send(&mut self, event: Event) -> bool {
        self.0.send(event).is_ok()
    }

    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

/// How one request runs besides its prompt and sampling.
struct RunOptions {
    endpoint: Endpoint,
    arrived: Instant,
    include_usage: bool,
    logprobs: Option<usize>,
    priority: Priority,
    ignore_eos: bool,
    stream: bool,
}

async fn run(
    state: Arc<ServerState>,
    prompt: Vec<u32>,
    params: SamplingParams,
    options: RunOptions,
) -> Result<Response, ApiError> {
    let ctx = ReplyContext::new(
        state,
        options.endpoint,
        options.arrived,
        options.include_usage,
        options.logprobs.is_some(),
    );
    let (tx, rx) = mpsc::unbounded_channel();
    let request = strata_engine::serve::Request {
        prompt,
        params,
        priority: options.priority,
        ignore_eos: options.ignore_eos,
        logprobs: options.logprobs,
        events: Box::new(ChannelSink(tx)),
    };
    ctx.state.engine.submit(request).map_err(|e| match e {
        SubmitError::Invalid(message) => ApiError::invalid(message),
        SubmitError::Overloaded { .. } => ApiError::overloaded(e.to_string()),
        SubmitError::Stopped => ApiError::unavailable(e.to_string()),
    })?;
    if options.stream {
        let events = reply::stream(ctx, rx);
        return Ok(Sse::new(events)
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    let body = reply::collect(ctx, rx).await?;
    Ok(Json(body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_equal_only_when_equal() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"secret"));
        assert!(constant_time_eq(b"", b""));
    }
}
