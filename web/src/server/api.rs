//! The OpenAI request bodies this server accepts, and their translation into engine requests. A field
//! that would constrain the output in a way the engine does not implement (`tools`, `tool_choice`,
//! `functions`, `function_call`, `response_format` other than text, `logit_bias`) is refused naming
//! it; other fields the engine does not use (`user`, `metadata`, ...) and unknown fields are
//! ignored; `null` means unset for every optional field; a field of the wrong type, or a value out of
//! range, is refused naming the field.

use serde::{Deserialize, Deserializer};
use serde_json::Value;
use strata_engine::sampling::SamplingParams;

use crate::openai_error::ApiError;

/// Text, or a list of texts (`stop`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

/// `null` reads as the field's default, as OpenAI clients send nulls for unset fields.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct StreamOptions {
    #[serde(default, deserialize_with = "null_as_default")]
    pub(crate) include_usage: bool,
}

/// Fields of OpenAI's API that constrain the output in ways the engine does not implement. Present
/// and not empty, they are refused naming the field, so that no caller believes a constraint held.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Unimplemented {
    tools: Option<Value>,
    tool_choice: Option<Value>,
    functions: Option<Value>,
    function_call: Option<Value>,
    response_format: Option<Value>,
    logit_bias: Option<Value>,
}

impl Unimplemented {
    fn check(&self) -> Result<(), ApiError> {
        let refuse = |field: &str, what: &str| {
            Err(ApiError::invalid_param(
                field,
                format!("{field} is not supported by this server ({what})"),
            ))
        };
        let empty = |v: &Option<Value>| match v {
            None => true,
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            Some(_) => false,
        };
        if !empty(&self.tools) || !empty(&self.functions) {
            let field = if empty(&self.tools) {
                "functions"
            } else {
                "tools"
            };
            return refuse(field, "no tool calling");
        }
        for (field, value) in [
            ("tool_choice", &self.tool_choice),
            ("function_call", &self.function_call),
        ] {
            if value.as_ref().is_some_and(|v| v != "none" && v != "auto") {
                return refuse(field, "no tool calling");
            }
        }
        if let Some(format) = &self.response_format
            && format.get("type").and_then(Value::as_str) != Some("text")
        {
            return refuse("response_format", "only {\"type\": \"text\"}");
        }
        if !empty(&self.logit_bias) {
            return refuse("logit_bias", "no logit bias");
        }
        Ok(())
    }
}

/// The sampling fields shared by both endpoints.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Sampling {
    pub(crate) temperature: Option<f32>,
    pub(crate) top_p: Option<f32>,
    pub(crate) stop: Option<OneOrMany>,
    pub(crate) seed: Option<i64>,
    pub(crate) n: Option<u32>,
    pub(crate) presence_penalty: Option<f32>,
    pub(crate) frequency_penalty: Option<f32>,
    /// Not in OpenAI's API; accepted as llama.cpp's and vLLM's servers do.
    pub(crate) top_k: Option<u32>,
    /// Not in OpenAI's API; accepted as llama.cpp's and vLLM's servers do.
    pub(crate) min_p: Option<f32>,
    /// Not in OpenAI's API; accepted as llama.cpp's and vLLM's servers do.
    pub(crate) repetition_penalty: Option<f32>,
    /// Not in OpenAI's API: generate exactly `max_tokens`, past end-of-turn tokens (as vLLM and
    /// llama.cpp accept it), for load tests that need fixed output lengths.
    #[serde(default, deserialize_with = "null_as_default")]
    pub(crate) ignore_eos: bool,
    #[serde(flatten)]
    pub(crate) unimplemented: Unimplemented,
}

/// A chat message's content: text, or a list of parts of which the text ones are used.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One part of a message's content.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ContentPart {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) text: Option<String>,
}

/// One message of a conversation.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Message {
    pub(crate) role: String,
    #[serde(default)]
    pub(crate) content: Option<Content>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ChatRequest {
    pub(crate) model: String,
    pub(crate) messages: Vec<Message>,
    pub(crate) max_tokens: Option<u32>,
    pub(crate) max_completion_tokens: Option<u32>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(crate) stream: bool,
    pub(crate) stream_options: Option<StreamOptions>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(crate) logprobs: bool,
    pub(crate) top_logprobs: Option<u32>,
    #[serde(flatten)]
    pub(crate) sampling: Sampling,
}

/// A completion prompt: text, one text in a list, or token ids.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CompletionRequest {
    pub(crate) model: String,
    pub(crate) prompt: Prompt,
    pub(crate) max_tokens: Option<u32>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(crate) stream: bool,
    pub(crate) stream_options: Option<StreamOptions>,
    pub(crate) logprobs: Option<u32>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(crate) echo: bool,
    pub(crate) suffix: Option<String>,
    pub(crate) best_of: Option<u32>,
    #[serde(flatten)]
    pub(crate) sampling: Sampling,
}

/// Most alternatives per token OpenAI allows.
const MAX_TOP_LOGPROBS: u32 = 20;

/// Parses a JSON body into `T`, refusing malformed JSON and wrong types with the serde message
/// (the expected type and where it was) and the field at fault as `param` when serde knows it
/// (not for the sampling fields, which are flattened into each request).
pub(crate) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::invalid(
            "The request body is empty; send a JSON object",
        ));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let parsed = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let field = e.path().to_string();
        refused_body(&e.into_inner(), Some(field))
    })?;
    deserializer.end().map_err(|e| refused_body(&e, None))?;
    Ok(parsed)
}

/// The 400 of a body serde refused, naming `field` when it is one (not the body itself, `.`, nor
/// a place serde cannot name, `?`).
fn refused_body(e: &serde_json::Error, field: Option<String>) -> ApiError {
    let what = match e.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
            "The request body is not valid JSON"
        }
        _ => "The request body does not match the API",
    };
    match field.filter(|f| f != "." && !f.contains('?')) {
        Some(field) => ApiError::invalid_param(&field, format!("{what}: {field}: {e}")),
        None => ApiError::invalid(format!("{what}: {e}")),
    }
}

impl Sampling {
    /// Engine sampling parameters for this request; `max_tokens` as resolved by the endpoint.
    pub(crate) fn to_params(&self, max_tokens: usize) -> Result<SamplingParams, ApiError> {
        self.unimplemented.check()?;
        if let Some(n) = self.n
            && n != 1
        {
            return Err(ApiError::invalid_param(
                "n",
                format!("n must be 1 (this server returns one choice per request), got {n}"),
            ));
        }
        let temperature = self.temperature.unwrap_or(1.0);
        if !(0.0..=2.0).contains(&temperature) {
            return Err(ApiError::invalid_param(
                "temperature",
                format!("temperature must be between 0 and 2, got {temperature}"),
            ));
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(ApiError::invalid_param(
                "top_p",
                format!("top_p must be in (0, 1], got {top_p}"),
            ));
        }
        for (name, value) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if let Some(v) = value
                && !(-2.0..=2.0).contains(&v)
            {
                return Err(ApiError::invalid_param(
                    name,
                    format!("{name} must be between -2 and 2, got {v}"),
                ));
            }
        }
        let stop = self
            .stop
            .clone()
            .map(OneOrMany::into_vec)
            .unwrap_or_default();
        if stop.len() > 4 {
            return Err(ApiError::invalid_param(
                "stop",
                format!("stop holds at most 4 sequences, got {}", stop.len()),
            ));
        }
        if stop.iter().any(String::is_empty) {
            return Err(ApiError::invalid_param(
                "stop",
                "stop sequences must not be empty",
            ));
        }
        let params = SamplingParams {
            temperature,
            top_k: self.top_k.unwrap_or(0) as usize,
            top_p,
            min_p: self.min_p.unwrap_or(0.0),
            repetition_penalty: self.repetition_penalty.unwrap_or(1.0),
            seed: self.seed.map_or_else(fresh_seed, |s| s as u64),
            max_tokens,
            stop,
            ..SamplingParams::default()
        };
        params
            .validate()
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        Ok(params)
    }
}

/// A seed for requests that bring none: different per request.
fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos
        ^ COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl ChatRequest {
    /// `max_completion_tokens`, else `max_tokens`, else what the context leaves.
    pub(crate) fn max_tokens(&self) -> Option<usize> {
        self.max_completion_tokens
            .or(self.max_tokens)
            .map(|n| n as usize)
    }

    /// The messages as the chat template takes them.
    pub(crate) fn template_messages(
        &self,
    ) -> Result<Vec<strata_engine::chat::ChatMessage>, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::invalid_param(
                "messages",
                "messages must hold at least one message",
            ));
        }
        self.messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                if !matches!(
                    m.role.as_str(),
                    "system" | "developer" | "user" | "assistant" | "tool"
                ) {
                    return Err(ApiError::invalid_param(
                        &format!("messages[{i}].role"),
                        format!(
                            "messages[{i}].role must be system, developer, user, assistant or \
                             tool, got `{}`",
                            m.role
                        ),
                    ));
                }
                let text = match &m.content {
                    None => String::new(),
                    Some(Content::Text(t)) => t.clone(),
                    Some(Content::Parts(parts)) => {
                        if let Some(p) = parts.iter().find(|p| p.kind != "text") {
                            return Err(ApiError::invalid_param(
                                &format!("messages[{i}].content"),
                                format!("content parts of type `{}` are not supported", p.kind),
                            ));
                        }
                        parts.iter().filter_map(|p| p.text.as_deref()).collect()
                    }
                };
                let role = if m.role == "developer" {
                    "system"
                } else {
                    &m.role
                };
                Ok(strata_engine::chat::ChatMessage::new(role, text))
            })
            .collect()
    }

    /// Alternatives per token to report, if any.
    pub(crate) fn logprobs(&self) -> Result<Option<usize>, ApiError> {
        let top = self.top_logprobs.unwrap_or(0);
        if top > MAX_TOP_LOGPROBS {
            return Err(ApiError::invalid_param(
                "top_logprobs",
                format!("top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {top}"),
            ));
        }
        if self.top_logprobs.is_some() && !self.logprobs {
            return Err(ApiError::invalid_param(
                "top_logprobs",
                "top_logprobs requires logprobs to be true",
            ));
        }
        Ok(self.logprobs.then_some(top as usize))
    }
}

impl CompletionRequest {
    /// Alternatives per token to report, if any.
    pub(crate) fn logprobs(&self) -> Result<Option<usize>, ApiError> {
        match self.logprobs {
            Some(n) if n > 5 => Err(ApiError::invalid_param(
                "logprobs",
                format!("logprobs must be between 0 and 5, got {n}"),
            )),
            other => Ok(other.map(|n| n as usize)),
        }
    }

    /// Refuses what the legacy API defines but this server does not do.
    pub(crate) fn check_unsupported(&self) -> Result<(), ApiError> {
        if self.echo {
            return Err(ApiError::invalid_param("echo", "echo is not supported"));
        }
        if self.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::invalid_param("suffix", "suffix is not supported"));
        }
        if self.best_of.is_some_and(|b| b != 1) {
            return Err(ApiError::invalid_param("best_of", "best_of must be 1"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_types_name_the_field() {
        let e = parse::<ChatRequest>(br#"{"model":"m","messages":[],"temperature":"hot"}"#)
            .expect_err("refused");
        assert!(e.message.contains("invalid type"), "{}", e.message);
        let e = parse::<ChatRequest>(
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1}"#,
        )
        .expect_err("refused");
        assert!(e.message.contains("does not match"), "{}", e.message);
        assert_eq!(e.param.as_deref(), Some("max_tokens"), "{}", e.message);
        let e = parse::<ChatRequest>(br#"{"model":"m","messages":[{"role":"user","content":7}]}"#)
            .expect_err("refused");
        assert_eq!(
            e.param.as_deref(),
            Some("messages[0].content"),
            "{}",
            e.message
        );
        let e = parse::<ChatRequest>(br#"{"model":"m","messages":[]} x"#).expect_err("refused");
        assert!(e.message.contains("trailing characters"), "{}", e.message);
        let e = parse::<ChatRequest>(b"{not json").expect_err("refused");
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
        let e = parse::<ChatRequest>(br#"{"messages":[]}"#).expect_err("refused");
        assert!(e.message.contains("missing field `model`"), "{}", e.message);
    }

    #[test]
    fn unknown_fields_are_ignored_and_defaults_follow_openai() {
        let r: ChatRequest = parse(
            br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],
                "user":"u1","parallel_tool_calls":false,"stop":"END","seed":5}"#,
        )
        .expect("parses");
        let params = r.sampling.to_params(16).expect("valid");
        assert_eq!(params.temperature, 1.0);
        assert_eq!(params.top_p, 1.0);
        assert_eq!((params.top_k, params.min_p), (0, 0.0));
        assert_eq!(params.stop, ["END"]);
        assert_eq!(params.seed, 5);
        let messages = r.template_messages().expect("valid");
        assert_eq!(messages[0].content, "hi");
    }

    #[test]
    fn constraints_the_engine_lacks_are_refused_naming_the_field() {
        let m = r#""model":"m","messages":[{"role":"user","content":"x"}]"#;
        let refused = |extra: &str| {
            let r: ChatRequest = parse(format!("{{{m},{extra}}}").as_bytes()).expect("parses");
            r.sampling.to_params(16).expect_err("refused").param
        };
        for (extra, field) in [
            (
                r#""tools":[{"type":"function","function":{"name":"f"}}]"#,
                "tools",
            ),
            (r#""functions":[{"name":"f"}]"#, "functions"),
            (r#""tool_choice":"required""#, "tool_choice"),
            (r#""function_call":{"name":"f"}"#, "function_call"),
            (
                r#""response_format":{"type":"json_schema","json_schema":{}}"#,
                "response_format",
            ),
            (
                r#""response_format":{"type":"json_object"}"#,
                "response_format",
            ),
            (r#""logit_bias":{"50256":-100}"#, "logit_bias"),
            (r#""logit_bias":"x""#, "logit_bias"),
        ] {
            assert_eq!(refused(extra).as_deref(), Some(field), "{extra}");
        }
        for extra in [
            r#""tools":[]"#,
            r#""tools":null,"tool_choice":null,"logit_bias":null,"response_format":null"#,
            r#""tool_choice":"none""#,
            r#""response_format":{"type":"text"}"#,
            r#""logit_bias":{}"#,
        ] {
            let r: ChatRequest = parse(format!("{{{m},{extra}}}").as_bytes()).expect("parses");
            r.sampling.to_params(16).expect(extra);
        }
    }

    #[test]
    fn null_means_unset_for_optional_fields() {
        let r: ChatRequest = parse(
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":null,
                "logprobs":null,"top_logprobs":null,"stream_options":{"include_usage":null},
                "ignore_eos":null,"temperature":null,"stop":null,"max_tokens":null}"#,
        )
        .expect("parses");
        assert!(!r.stream && !r.logprobs && !r.sampling.ignore_eos);
        assert_eq!(r.logprobs().expect("valid"), None);
        r.sampling.to_params(16).expect("valid");
        let c: CompletionRequest =
            parse(br#"{"model":"m","prompt":"x","stream":null,"echo":null,"logprobs":null}"#)
                .expect("parses");
        assert!(!c.stream && !c.echo);
    }

    #[test]
    fn out_of_range_values_are_refused() {
        let bad = |body: &str| {
            let r: ChatRequest = parse(body.as_bytes()).expect("parses");
            r.sampling
                .to_params(16)
                .and_then(|_| r.logprobs())
                .and_then(|_| r.template_messages())
                .expect_err("refused")
        };
        let m = r#""model":"m","messages":[{"role":"user","content":"x"}]"#;
        assert_eq!(bad(&format!("{{{m},\"n\":2}}")).param.as_deref(), Some("n"));
        assert_eq!(
            bad(&format!("{{{m},\"temperature\":3}}")).param.as_deref(),
            Some("temperature")
        );
        assert_eq!(
            bad(&format!("{{{m},\"top_p\":0}}")).param.as_deref(),
            Some("top_p")
        );
        assert_eq!(
            bad(&format!("{{{m},\"logprobs\":true,\"top_logprobs\":21}}"))
                .param
                .as_deref(),
            Some("top_logprobs")
        );
        assert_eq!(
            bad(r#"{"model":"m","messages":[{"role":"wizard","content":"x"}]}"#)
                .param
                .as_deref(),
            Some("messages[0].role")
        );
        assert_eq!(
            bad(r#"{"model":"m","messages":[]}"#).param.as_deref(),
            Some("messages")
        );
    }
}
