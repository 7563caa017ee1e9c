//! Turning the engine's events for one request into OpenAI answers: one JSON body, or server-sent
//! events chunk by chunk ending with `data: [DONE]`. Latencies are observed here as tokens leave.

use std::{
    convert::Infallible,
    sync::Arc,
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use axum::response::sse::Event as SseEvent;
use futures_util::{Stream, StreamExt, stream};
use serde_json::{Value, json};
use strata_engine::{
    generate::StopReason,
    serve::{Event, Finish, TokenLogprob},
    tokenizer::Tokenizer,
};
use tokio::sync::mpsc;

use super::ServerState;
use crate::openai_error::ApiError;

/// Which API shape to answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Chat,
    Completions,
}

impl Endpoint {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Chat => "chat_completions",
            Self::Completions => "completions",
        }
    }
}

/// What one answer needs besides the events.
pub(crate) struct ReplyContext {
    pub(crate) state: Arc<ServerState>,
    pub(crate) endpoint: Endpoint,
    pub(crate) id: String,
    pub(crate) created: u64,
    pub(crate) arrived: Instant,
    pub(crate) include_usage: bool,
    pub(crate) logprobs: bool,
}

impl ReplyContext {
    pub(crate) fn new(
        state: Arc<ServerState>,
        endpoint: Endpoint,
        arrived: Instant,
        include_usage: bool,
        logprobs: bool,
    ) -> Self {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let prefix = match endpoint {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completions => "cmpl",
        };
        let id = format!("{prefix}-{}", state.next_id());
        Self {
            state,
            endpoint,
            id,
            created,
            arrived,
            include_usage,
            logprobs,
        }
    }
}

/// Observes TTFT, ITL and E2E for one request.
struct Clock {
    arrived: Instant,
    last: Option<Instant>,
}

impl Clock {
    fn token(&mut self, ctx: &ReplyContext) {
        let now = Instant::now();
        let m = &ctx.state.metrics;
        match self.last {
            None => m
                .ttft
                .with_label_values(&[ctx.endpoint.label()])
                .observe((now - self.arrived).as_secs_f64()),
            Some(last) => m.itl.observe((now - last).as_secs_f64()),
        }
        self.last = Some(now);
    }

    fn done(&self, ctx: &ReplyContext) {
        ctx.state
            .metrics
            .e2e
            .with_label_values(&[ctx.endpoint.label()])
            .observe(self.arrived.elapsed().as_secs_f64());
    }
}

fn finish_reason(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndOfGeneration | StopReason::StopString => "stop",
        StopReason::MaxTokens | StopReason::ContextFull => "length",
    }
}

fn usage(done: &Finish) -> Value {
    json!({
        "prompt_tokens": done.prompt_tokens,
        "completion_tokens": done.completion_tokens,
        "total_tokens": done.prompt_tokens + done.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": done.cached_tokens},
    })
}

fn token_text(tokenizer: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = tokenizer.piece(id).to_vec();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// One token's chat `logprobs.content` entry.
fn chat_logprob(tokenizer: &Tokenizer, id: u32, lp: &TokenLogprob) -> Value {
    let (token, bytes) = token_text(tokenizer, id);
    let top: Vec<Value> = lp
        .top
        .iter()
        .map(|&(alt, logprob)| {
            let (token, bytes) = token_text(tokenizer, alt);
            json!({"token": token, "logprob": logprob, "bytes": bytes})
        })
        .collect();
    json!({"token": token, "logprob": lp.logprob, "bytes": bytes, "top_logprobs": top})
}

/// The legacy completions `logprobs` object for a run of tokens.
#[derive(Default)]
struct LegacyLogprobs {
    tokens: Vec<String>,
    token_logprobs: Vec<f32>,
    top_logprobs: Vec<serde_json::Map<String, Value>>,
    text_offset: Vec<usize>,
}

impl LegacyLogprobs {
    fn push(&mut self, tokenizer: &Tokenizer, id: u32, lp: &TokenLogprob, offset: usize) {
        self.tokens.push(token_text(tokenizer, id).0);
        self.token_logprobs.push(lp.logprob);
        self.top_logprobs.push(
            lp.top
                .iter()
                .map(|&(alt, l)| (token_text(tokenizer, alt).0, json!(l)))
                .collect(),
        );
        self.text_offset.push(offset);
    }

    fn to_json(&self) -> Value {
        json!({
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        })
    }
}

/// Waits for the whole answer and returns the response body.
pub(crate) async fn collect(
    ctx: ReplyContext,
    mut rx: mpsc::UnboundedReceiver<Event>,
) -> Result<Value, ApiError> {
    let tokenizer = &ctx.state.engine.model().tokenizer;
    let mut clock = Clock {
        arrived: ctx.arrived,
        last: None,
    };
    let mut text = String::new();
    let mut chat_logprobs = Vec::new();
    let mut legacy = LegacyLogprobs::default();
    let done = loop {
        match rx.recv().await {
            Some(Event::Token(t)) => {
                clock.token(&ctx);
                if let Some(lp) = &t.logprob {
                    match ctx.endpoint {
                        Endpoint::Chat => chat_logprobs.push(chat_logprob(tokenizer, t.id, lp)),
                        Endpoint::Completions => legacy.push(tokenizer, t.id, lp, text.len()),
                    }
                }
                text.push_str(&t.text);
            }
            Some(Event::Done(done)) => break done,
            Some(Event::Failed(message)) => return Err(ApiError::internal(message)),
            None => return Err(ApiError::unavailable("the engine stopped")),
        }
    };
    clock.done(&ctx);
    text.push_str(&done.text);
    let reason = finish_reason(done.reason);
    let choice = match ctx.endpoint {
        Endpoint::Chat => json!({
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": ctx.logprobs.then(|| json!({"content": chat_logprobs})),
            "finish_reason": reason,
        }),
        Endpoint::Completions => json!({
            "index": 0,
            "text": text,
            "logprobs": ctx.logprobs.then(|| legacy.to_json()),
            "finish_reason": reason,
        }),
    };
    Ok(json!({
        "id": ctx.id,
        "object": match ctx.endpoint { Endpoint::Chat => "chat.completion", Endpoint::Completions => "text_completion" },
        "created": ctx.created,
        "model": ctx.state.options.served_model,
        "choices": [choice],
        "usage": usage(&done),
        "system_fingerprint": ctx.state.fingerprint,
    }))
}

/// State of a streaming answer between engine events.
struct Streaming {
    ctx: ReplyContext,
    rx: mpsc::UnboundedReceiver<Event>,
    clock: Clock,
    sent_role: bool,
    text_len: usize,
    finished: bool,
}

/// The answer as server-sent events.
pub(crate) fn stream(
    ctx: ReplyContext,
    rx: mpsc::UnboundedReceiver<Event>,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let clock = Clock {
        arrived: ctx.arrived,
        last: None,
    };
    let state = Streaming {
        ctx,
        rx,
        clock,
        sent_role: false,
        text_len: 0,
        finished: false,
    };
    stream::unfold(state, |mut s| async move {
        if s.finished {
            return None;
        }
        let events = s.next_events().await;
        Some((stream::iter(events.into_iter().map(Ok)), s))
    })
    .flatten()
}

impl Streaming {
    fn chunk(&self, choices: Value, usage: Option<Value>) -> SseEvent {
        let object = match self.ctx.endpoint {
            Endpoint::Chat => "chat.completion.chunk",
            Endpoint::Completions => "text_completion",
        };
        let mut body = json!({
            "id": self.ctx.id,
            "object": object,
            "created": self.ctx.created,
            "model": self.ctx.state.options.served_model,
            "system_fingerprint": self.ctx.state.fingerprint,
            "choices": choices,
        });
        if self.ctx.include_usage {
            body["usage"] = usage.unwrap_or(Value::Null);
        }
        SseEvent::default().data(body.to_string())
    }

    fn text_choice(&self, text: &str, logprobs: Option<Value>, finish: Option<&str>) -> Value {
        match self.ctx.endpoint {
            Endpoint::Chat => {
                let delta = if finish.is_some() && text.is_empty() {
                    json!({})
                } else {
                    json!({"content": text})
                };
                json!([{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}])
            }
            Endpoint::Completions => {
                json!([{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}])
            }
        }
    }

    /// Waits for the next engine event and returns the chunks it becomes.
    async fn next_events(&mut self) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if !self.sent_role && self.ctx.endpoint == Endpoint::Chat {
            self.sent_role = true;
            out.push(self.chunk(
                json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]),
                None,
            ));
        }
        match self.rx.recv().await {
            Some(Event::Token(t)) => {
                self.clock.token(&self.ctx);
                let tokenizer = &self.ctx.state.engine.model().tokenizer;
                let logprobs = t.logprob.as_ref().map(|lp| match self.ctx.endpoint {
                    Endpoint::Chat => json!({"content": [chat_logprob(tokenizer, t.id, lp)]}),
                    Endpoint::Completions => {
                        let mut legacy = LegacyLogprobs::default();
                        legacy.push(tokenizer, t.id, lp, self.text_len);
                        legacy.to_json()
                    }
                });
                self.text_len += t.text.len();
                if !t.text.is_empty() || logprobs.is_some() {
                    out.push(self.chunk(self.text_choice(&t.text, logprobs, None), None));
                }
            }
            Some(Event::Done(done)) => {
                self.clock.done(&self.ctx);
                self.finished = true;
                let reason = finish_reason(done.reason);
                if !done.text.is_empty() && self.ctx.endpoint == Endpoint::Chat {
                    out.push(self.chunk(self.text_choice(&done.text, None, None), None));
                    out.push(self.chunk(self.text_choice("", None, Some(reason)), None));
                } else {
                    out.push(self.chunk(self.text_choice(&done.text, None, Some(reason)), None));
                }
                if self.ctx.include_usage {
                    out.push(self.chunk(json!([]), Some(usage(&done))));
                }
                out.push(SseEvent::default().data("[DONE]"));
            }
            Some(Event::Failed(message)) => {
                self.finished = true;
                out.push(SseEvent::default().data(ApiError::internal(message).body().to_string()));
                out.push(SseEvent::default().data("[DONE]"));
            }
            None => {
                self.finished = true;
                let error = ApiError::unavailable("the engine stopped");
                out.push(SseEvent::default().data(error.body().to_string()));
            }
        }
        out
    }
}
