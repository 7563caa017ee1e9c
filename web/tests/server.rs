//! The engine server's HTTP surface on a tiny random model, through the router without a socket:
//! OpenAI response shapes (JSON and server-sent events), usage, logprobs, keys, limits, and a clear
//! 4xx for every kind of bad input.

use std::{path::Path, sync::Arc};

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use strata_controller::profile::FirstTokens;
use strata_engine::{
    format::gguf_writer::tiny_llama_gguf,
    loader::LoadedModel,
    model::LoadOptions,
    serve::{Engine, ServeConfig},
    weights::WeightType,
};
use strata_web::server::{self, ServerOptions};
use tower::ServiceExt;

const MODEL: &str = "tiny";

fn engine(config: ServeConfig) -> Arc<Engine> {
    let loaded = LoadedModel::from_gguf_bytes(
        Path::new("tiny.gguf"),
        tiny_llama_gguf(5, WeightType::Q8_0),
        LoadOptions {
            weights: None,
            threads: 1,
            placement: Default::default(),
        },
    )
    .expect("loads");
    Arc::new(Engine::start(Arc::new(loaded), config).expect("starts"))
}

fn app_with(config: ServeConfig, options: ServerOptions) -> Router {
    server::router(engine(config), options).expect("router")
}

fn app() -> Router {
    app_with(ServeConfig::default(), ServerOptions::new(MODEL))
}

async fn call(
    app: &Router,
    method: &str,
    uri: &str,
    body: Option<&str>,
) -> (StatusCode, Vec<(String, String)>, String) {
    call_with(app, method, uri, body, &[]).await
}

async fn call_with(
    app: &Router,
    method: &str,
    uri: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> (StatusCode, Vec<(String, String)>, String) {
    let mut request = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let request = request
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_owned())))
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("answers");
    let status = response.status();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[tokio::test]
async fn chat_completion_has_the_openai_shape_and_usage() {
    let app = app();
    let body = json!({
        "model": MODEL,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the cat"}],
        "max_tokens": 5, "temperature": 0, "logprobs": true, "top_logprobs": 2,
    });
    let (status, _, text) = call(
        &app,
        "POST",
        "/v1/chat/completions",
        Some(&body.to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v = json(&text);
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], MODEL);
    assert!(
        v["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("chatcmpl-"))
    );
    let choice = &v["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert!(["stop", "length"].contains(&choice["finish_reason"].as_str().unwrap_or("")));
    let usage = &v["usage"];
    let completion = usage["completion_tokens"].as_u64().expect("count");
    assert!((1..=5).contains(&completion), "{usage}");
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["prompt_tokens"].as_u64().expect("prompt") + completion)
    );
    let content = choice["logprobs"]["content"].as_array().expect("logprobs");
    assert_eq!(content.len() as u64, completion);
    assert_eq!(content[0]["top_logprobs"].as_array().map(Vec::len), Some(2));
    assert!(content[0]["logprob"].as_f64().expect("logprob") <= 0.0);
}

#[tokio::test]
async fn streamed_chat_ends_with_done_and_matches_the_plain_answer() {
    let app = app();
    let request = |stream: bool| {
        json!({
            "model": MODEL, "messages": [{"role": "user", "content": "a hat"}],
            "max_completion_tokens": 8, "temperature": 0, "stream": stream,
            "stream_options": {"include_usage": true},
        })
        .to_string()
    };
    let (_, _, plain) = call(&app, "POST", "/v1/chat/completions", Some(&request(false))).await;
    let plain = json(&plain);
    let (status, headers, text) =
        call(&app, "POST", "/v1/chat/completions", Some(&request(true))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "content-type" && v.starts_with("text/event-stream"))
    );
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| json(d)).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(
        streamed,
        plain["choices"][0]["message"]["content"]
            .as_str()
            .expect("text")
    );
    let finish = chunks
        .iter()
        .find_map(|c| c["choices"][0]["finish_reason"].as_str())
        .expect("a finish reason");
    assert_eq!(finish, plain["choices"][0]["finish_reason"]);
    let usage = &chunks.last().expect("usage chunk")["usage"];
    assert_eq!(chunks.last().expect("chunk")["choices"], json!([]));
    assert_eq!(
        usage["completion_tokens"],
        plain["usage"]["completion_tokens"]
    );
}

#[tokio::test]
async fn completions_accept_text_and_token_prompts() {
    let app = app();
    let (status, _, text) = call(
        &app,
        "POST",
        "/v1/completions",
        Some(r#"{"model":"tiny","prompt":"the cat","max_tokens":4,"temperature":0,"logprobs":1}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let v = json(&text);
    assert_eq!(v["object"], "text_completion");
    let lp = &v["choices"][0]["logprobs"];
    assert_eq!(
        lp["tokens"].as_array().map(Vec::len),
        v["usage"]["completion_tokens"].as_u64().map(|n| n as usize)
    );
    let (status, _, text) = call(
        &app,
        "POST",
        "/v1/completions",
        Some(r#"{"model":"tiny","prompt":[5,6,7,8],"max_tokens":3,"temperature":0}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(json(&text)["usage"]["prompt_tokens"], 4);
    // Default max_tokens of the legacy endpoint is 16.
    let (_, _, text) = call(
        &app,
        "POST",
        "/v1/completions",
        Some(r#"{"model":"tiny","prompt":"a","temperature":0,"stop":["zzzz"]}"#),
    )
    .await;
    assert!(
        json(&text)["usage"]["completion_tokens"]
            .as_u64()
            .expect("n")
            <= 16
    );
}

#[tokio::test]
async fn bad_input_gets_a_4xx_naming_the_problem() {
    let app = app_with(
        ServeConfig::default(),
        ServerOptions {
            max_body_bytes: 2048,
            ..ServerOptions::new(MODEL)
        },
    );
    let cases: Vec<(String, StatusCode, &str)> = vec![
        (
            "{not json".into(),
            StatusCode::BAD_REQUEST,
            "not valid JSON",
        ),
        ("".into(), StatusCode::BAD_REQUEST, "body is empty"),
        (
            r#"{"model":"tiny","messages":"hi"}"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid type",
        ),
        (
            r#"{"model":"tiny","messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#
                .into(),
            StatusCode::BAD_REQUEST,
            "invalid type",
        ),
        (
            r#"{"model":"tiny","messages":[]}"#.into(),
            StatusCode::BAD_REQUEST,
            "at least one message",
        ),
        (
            r#"{"model":"tiny","messages":[{"role":"user","content":""}],"max_tokens":5}"#.into(),
            StatusCode::BAD_REQUEST,
            "",
        ),
        (
            r#"{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}"#.into(),
            StatusCode::NOT_FOUND,
            "does not exist",
        ),
        (
            r#"{"model":"tiny","messages":[{"role":"user","content":"x"}],"max_tokens":100000}"#
                .into(),
            StatusCode::BAD_REQUEST,
            "maximum context length",
        ),
        (
            r#"{"model":"tiny","messages":[{"role":"user","content":"x"}],"n":3}"#.into(),
            StatusCode::BAD_REQUEST,
            "n must be 1",
        ),
        (
            format!(
                r#"{{"model":"tiny","messages":[{{"role":"user","content":"{}"}}]}}"#,
                "x".repeat(4000)
            ),
            StatusCode::PAYLOAD_TOO_LARGE,
            "exceeds 2048 bytes",
        ),
    ];
    for (body, status, needle) in cases {
        let (got, _, text) = call(&app, "POST", "/v1/chat/completions", Some(&body)).await;
        if needle.is_empty() {
            // An empty user message still renders a template prompt: it must succeed.
            assert_eq!(got, StatusCode::OK, "{body}: {text}");
            continue;
        }
        assert_eq!(got, status, "{body}: {text}");
        let v = json(&text);
        let message = v["error"]["message"].as_str().expect("OpenAI error body");
        assert!(message.contains(needle), "{body}: {message}");
        assert!(v["error"]["type"].is_string());
    }
    let (status, _, text) = call(
        &app,
        "POST",
        "/v1/completions",
        Some(r#"{"model":"tiny","prompt":""}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(json(&text)["error"]["param"], "prompt");
    let (status, _, text) = call(
        &app,
        "POST",
        "/v1/completions",
        Some(r#"{"model":"tiny","prompt":[999999]}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("outside the vocabulary"), "{text}");
    let (status, _, text) = call_with(
        &app,
        "POST",
        "/v1/completions",
        Some(r#"{"model":"tiny","prompt":"x"}"#),
        &[("x-strata-priority", "urgent!")],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("x-strata-priority"), "{text}");
    let (status, _, _) = call(&app, "GET", "/v1/nothing", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn over_capacity_is_429_with_retry_after() {
    let app = app_with(
        ServeConfig {
            max_waiting: 0,
            ..ServeConfig::default()
        },
        ServerOptions::new(MODEL),
    );
    let (status, headers, text) = call(
        &app,
        "POST",
        "/v1/completions",
        Some(r#"{"model":"tiny","prompt":"x","max_tokens":2}"#),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{text}");
    assert!(headers.iter().any(|(k, v)| k == "retry-after" && v == "1"));
    assert_eq!(json(&text)["error"]["code"], "over_capacity");
}

#[tokio::test]
async fn api_key_guards_v1_but_not_health() {
    let app = app_with(
        ServeConfig::default(),
        ServerOptions {
            api_key: Some("sk-test".into()),
            ..ServerOptions::new(MODEL)
        },
    );
    let (status, _, text) = call(&app, "GET", "/v1/models", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(json(&text)["error"]["type"], "authentication_error");
    let (status, _, _) = call_with(
        &app,
        "GET",
        "/v1/models",
        None,
        &[("authorization", "Bearer sk-wrong")],
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, text) = call_with(
        &app,
        "GET",
        "/v1/models",
        None,
        &[("authorization", "Bearer sk-test")],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json(&text)["data"][0]["id"], MODEL);
    let (status, _, _) = call(&app, "GET", "/health", None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn metrics_expose_the_scheduler_and_latencies() {
    let app = app();
    let (status, _, _) = call(
        &app,
        "POST",
        "/v1/completions",
        Some(r#"{"model":"tiny","prompt":"the cat and the hat","max_tokens":3,"temperature":0}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, text) = call(&app, "GET", "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    for name in [
        "strata_queue_depth",
        "strata_running_sequences",
        "strata_kv_blocks{state=\"free\"}",
        "strata_kv_blocks{state=\"used\"}",
        "strata_prefix_cache_hit_rate",
        "strata_prompt_tokens_total",
        "strata_generated_tokens_total",
        "strata_ttft_seconds_bucket",
        "strata_itl_seconds_bucket",
        "strata_e2e_seconds_count{endpoint=\"completions\"} 1",
        "strata_requests_total{endpoint=\"completions\",status=\"200\"} 1",
    ] {
        assert!(text.contains(name), "missing {name} in\n{text}");
    }
    // The pilot's calibration reads the engine's own TTFT from this text.
    let first_tokens = FirstTokens::from_metrics(&text);
    assert_eq!(first_tokens.requests, 1, "{text}");
    assert!(first_tokens.seconds > 0.0, "{text}");
}

/// A completion is one step with the prompt, then a decode-only step of one request for each token
/// after the first.
#[tokio::test]
async fn steps_report_what_each_step_ran() {
    let app = app();
    let (status, _, answer) = call(
        &app,
        "POST",
        "/v1/completions",
        Some(r#"{"model":"tiny","prompt":"the cat and the hat","max_tokens":3,"temperature":0}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let generated = json(&answer)["usage"]["completion_tokens"]
        .as_u64()
        .expect(&answer);
    let (status, _, text) = call(&app, "GET", "/steps", None).await;
    assert_eq!(status, StatusCode::OK);
    let times: strata_engine::serve::StepTimes = serde_json::from_str(&text).expect(&text);
    assert_eq!(times.steps(), generated, "{text}");
    assert_eq!(times.prompt[0].steps, 1, "{text}");
    assert!(
        times.prompt[0].tokens >= 5.0 && times.prompt[0].seconds > 0.0,
        "{text}"
    );
    assert_eq!(times.decode[1].steps, generated - 1, "{text}");
}
