//! Request preparation: the SLA class from the header or the key, the few body fields the gateway
//! looks at (model, stream, token counts), and the body to forward (asking streams for usage).

use axum::{
    body::{Body, Bytes, to_bytes},
    http::HeaderMap,
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    REQUEST_ID_HEADER, SLA_HEADER, SLO_TPOT_HEADER, SLO_TTFT_HEADER, keys::KeyIndex, prompt,
    table::Table,
};
use crate::openai_error::ApiError;

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// The fields the gateway looks at; the body is forwarded as it came.
#[derive(Debug, Deserialize)]
struct Peek {
    model: Option<String>,
    #[serde(default)]
    prompt: prompt::TokenIds,
    #[serde(default)]
    stream: bool,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    stream_options: Option<StreamOptions>,
}

/// Which OpenAI endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    Chat,
    Completions,
}

impl Api {
    /// The path it is forwarded to.
    pub(crate) fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Completions => "/v1/completions",
        }
    }
}

/// A request's own latency targets, from `x-slo-ttft-ms` and `x-slo-tpot-ms`; each one set takes the
/// place of its class's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Targets {
    /// Time to first token, seconds.
    pub(crate) ttft_s: Option<f64>,
    /// Time per output token after the first, seconds.
    pub(crate) tpot_s: Option<f64>,
}

/// Longest target a header may set: an hour.
const MAX_TARGET_MS: f64 = 3_600_000.0;

impl Targets {
    /// The targets `headers` set.
    ///
    /// # Errors
    /// A 400 [`ApiError`] naming the header whose value is not a positive number of milliseconds.
    pub(crate) fn from_headers(headers: &HeaderMap) -> Result<Targets, ApiError> {
        Ok(Targets {
            ttft_s: target_s(headers, SLO_TTFT_HEADER)?,
            tpot_s: target_s(headers, SLO_TPOT_HEADER)?,
        })
    }
}

/// The target header `name` sets, in seconds; none when it is absent.
fn target_s(headers: &HeaderMap, name: &str) -> Result<Option<f64>, ApiError> {
    let Some(v) = headers.get(name) else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(v.as_bytes());
    match text.trim().parse::<f64>() {
        Ok(ms) if ms > 0.0 && ms <= MAX_TARGET_MS => Ok(Some(ms / 1e3)),
        _ => Err(ApiError::invalid(format!(
            "{name}: `{}` is not a number of milliseconds above 0 and at most {MAX_TARGET_MS}",
            crate::openai_error::echo(text.trim())
        ))),
    }
}

/// A parsed request, ready to route.
pub(crate) struct Prepared {
    /// The request id (the client's `x-request-id`, else a new one).
    pub(crate) id: String,
    /// Index of its SLA class.
    pub(crate) class: usize,
    /// Its own latency targets.
    pub(crate) targets: Targets,
    /// The model asked for.
    pub(crate) model: String,
    /// True for a streamed answer.
    pub(crate) stream: bool,
    /// True when the client asked for the usage event itself.
    pub(crate) client_usage: bool,
    /// Prompt tokens, counted or estimated.
    pub(crate) prompt_tokens: u32,
    /// Output tokens planned for.
    pub(crate) output_tokens: u32,
    /// The body to forward.
    pub(crate) body: Bytes,
    /// The endpoint it came to.
    pub(crate) api: Api,
}

/// Reads what routing needs from `headers` and `body`; `new_id` names a request that brought no id.
///
/// # Errors
/// A 400/404 [`ApiError`] for an unknown class, a body that is not JSON, or a missing or unserved model.
pub(crate) fn prepare(
    table: &Table,
    key: KeyIndex,
    headers: &HeaderMap,
    body: Bytes,
    api: Api,
    new_id: impl FnOnce() -> String,
) -> Result<Prepared, ApiError> {
    let config = &table.config;
    let class = class_of(table, key, headers)?;
    let targets = Targets::from_headers(headers)?;
    let peek: Peek = serde_json::from_slice(&body)
        .map_err(|e| ApiError::invalid(format!("The body is not a valid JSON request: {e}")))?;
    let model = peek
        .model
        .ok_or_else(|| ApiError::invalid_param("model", "`model` is required"))?;
    if !table.pools.iter().any(|p| p.config.models.contains(&model)) {
        return Err(ApiError::model_not_found(
            &model,
            &table.models().join(", "),
        ));
    }
    let client_usage = peek
        .stream_options
        .as_ref()
        .is_some_and(|o| o.include_usage);
    let default_out = if api == Api::Completions {
        16
    } else {
        config.classes[class].default_output_tokens
    };
    let output_tokens = peek
        .max_completion_tokens
        .or(peek.max_tokens)
        .unwrap_or(default_out)
        .max(1);
    let prompt_tokens = peek.prompt.tokens_or_estimate(body.len());
    let body = if peek.stream && !client_usage {
        with_usage_asked(peek.stream_options.is_some(), body)?
    } else {
        body
    };
    let id = headers
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty() && s.len() <= 128)
        .map_or_else(new_id, str::to_owned);
    Ok(Prepared {
        id,
        class,
        targets,
        model,
        stream: peek.stream,
        client_usage,
        prompt_tokens,
        output_tokens,
        body,
        api,
    })
}

/// The SLA class `x-strata-sla` names, else the key's default class, else the config's.
fn class_of(table: &Table, key: KeyIndex, headers: &HeaderMap) -> Result<usize, ApiError> {
    let config = &table.config;
    let Some(v) = headers.get(SLA_HEADER) else {
        return Ok(key
            .0
            .and_then(|i| table.keys[i].config.class)
            .unwrap_or(config.default_class));
    };
    let name = String::from_utf8_lossy(v.as_bytes());
    let name = name.trim();
    config
        .classes
        .iter()
        .position(|c| c.name == name)
        .ok_or_else(|| {
            let known: Vec<&str> = config.classes.iter().map(|c| c.name.as_str()).collect();
            ApiError::invalid(format!(
                "{SLA_HEADER}: unknown SLA class `{}`; known: {}",
                crate::openai_error::echo(name),
                known.join(", ")
            ))
        })
}

/// A stream's body asking the upstream for usage, so the ledger gets real token counts; the relay
/// drops that event. `has_options`: the body already has `stream_options`, to be overwritten.
fn with_usage_asked(has_options: bool, body: Bytes) -> Result<Bytes, ApiError> {
    if !has_options && let Some(b) = with_usage_option(&body) {
        return Ok(b);
    }
    let mut v: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::invalid(format!("The body is not valid JSON: {e}")))?;
    v["stream_options"] = json!({"include_usage": true});
    Ok(Bytes::from(
        serde_json::to_vec(&v).map_err(|e| ApiError::internal(e.to_string()))?,
    ))
}

/// `body` (a non-empty JSON object without `stream_options`) with `"stream_options":{"include_usage":true}`
/// spliced in after its opening brace, without re-serializing it; `None` when it does not start that way.
fn with_usage_option(body: &[u8]) -> Option<Bytes> {
    const FIELD: &[u8] = br#""stream_options":{"include_usage":true},"#;
    let open = body.iter().position(|b| !b.is_ascii_whitespace())?;
    if body[open] != b'{' {
        return None;
    }
    let next = body[open + 1..].iter().find(|b| !b.is_ascii_whitespace())?;
    if *next == b'}' {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() + FIELD.len());
    out.extend_from_slice(&body[..=open]);
    out.extend_from_slice(FIELD);
    out.extend_from_slice(&body[open + 1..]);
    Some(Bytes::from(out))
}

/// Reads the whole request body, at most the config's `max_body_bytes`.
pub(crate) async fn read_body(table: &Table, body: Body) -> Result<Bytes, ApiError> {
    let limit = table.config.max_body_bytes;
    to_bytes(body, limit)
        .await
        .map_err(|e| ApiError::unreadable_body(e, limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usage_option_is_spliced_into_the_object() {
        let b = with_usage_option(br#" {"model":"m","stream":true}"#).expect("an object");
        let v: Value = serde_json::from_slice(&b).expect("still JSON");
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["model"], "m");
        assert!(with_usage_option(b"{ }").is_none());
        assert!(with_usage_option(b"[1]").is_none());
    }
}
