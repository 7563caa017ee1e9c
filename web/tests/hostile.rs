//! Hostile clients over real loopback sockets against the three listeners: the engine server (a tiny
//! random model), the gateway (before an in-process upstream) and the dashboard (an empty store).
//! Half-sent headers and bodies, a slow-loris trickle, idle and capped connections, oversized headers,
//! a stream that outlasts every listener timeout, and bodies that are deeply nested, not UTF-8, out of
//! range or too long for the context. Each test checks the status, the error body's OpenAI shape and
//! that a normal request is served afterwards. Every loop is bounded in count and time.

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    body::{Body, Bytes},
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use futures_util::StreamExt;
use serde_json::{Value, json};
use strata_engine::{
    format::gguf_writer::tiny_llama_gguf,
    loader::LoadedModel,
    model::LoadOptions,
    serve::{Engine, ServeConfig},
    weights::WeightType,
};
use strata_web::{
    gateway::{
        self, GatewayState,
        config::{GatewayConfig, Source},
    },
    listener::{self, ListenerLimits},
    server::{self, ServerOptions},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::oneshot,
    task::JoinHandle,
};

const MODEL: &str = "tiny";
/// How much later than its timeout a connection may be closed (a loaded CI machine).
const SLACK: Duration = Duration::from_millis(1500);

/// Short timeouts, so that the tests see them fire: headers and bodies within 1 s, 30 s idle (long,
/// so that only the timeout under test can close a connection).
fn short_limits() -> ListenerLimits {
    ListenerLimits {
        header_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(30),
        max_connections: 256,
        ..ListenerLimits::default()
    }
}

/// A listener serving in the background until stopped.
struct Running {
    addr: SocketAddr,
    base: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Running {
    async fn start(router: Router, limits: ListenerLimits) -> Self {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let addr = tcp.local_addr().expect("address");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(listener::serve(tcp, router, limits, async {
            let _ = stopped.await;
        }));
        Self::new(addr, stop, task)
    }

    fn new(addr: SocketAddr, stop: oneshot::Sender<()>, task: JoinHandle<()>) -> Self {
        Self {
            addr,
            base: format!("http://{addr}"),
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops the listener; it must finish within 10 s.
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("shuts down in time")
                .expect("joins");
        }
    }
}

fn engine_router(options: ServerOptions) -> Router {
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
    let engine = Arc::new(Engine::start(Arc::new(loaded), ServeConfig::default()).expect("starts"));
    server::router(engine, options).expect("router")
}

/// A client that opens a connection per request: a pooled one could be reused just as the server
/// closes it for idling, which is the client's race to retry, not what these tests measure.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
}

/// A short completion on the engine server; its status.
async fn normal_completion(c: &reqwest::Client, base: &str) -> StatusCode {
    c.post(format!("{base}/v1/completions"))
        .json(&json!({"model": MODEL, "prompt": "the cat", "max_tokens": 2}))
        .send()
        .await
        .expect("the server answers")
        .status()
}

/// Asserts that `body` is an OpenAI error (`{"error": {"message", "type", "param", "code"}}`) whose
/// message contains `needle`; returns it.
fn assert_openai_error(body: &str, needle: &str) -> Value {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    let error = &v["error"];
    let message = error["message"].as_str().expect("error.message");
    assert!(message.contains(needle), "`{needle}` not in {message}");
    assert!(error["type"].is_string(), "error.type: {body}");
    let fields = error.as_object().expect("error is an object");
    assert!(
        fields.contains_key("param") && fields.contains_key("code"),
        "{body}"
    );
    v
}

/// Opens a connection to `addr` and sends `bytes` on it.
async fn send_raw(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    stream.write_all(bytes).await.expect("sends");
    stream
}

/// Reads from `stream` until the server closes it (end of stream or reset), for at most `within`;
/// returns what was read. Panics when the connection is still open then.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Vec<u8> {
    let mut received = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => panic!(
                "still open after {within:?}; got {:?}",
                String::from_utf8_lossy(&received)
            ),
            Ok(Ok(0) | Err(_)) => return received,
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// Splits a raw HTTP/1.1 answer into its status code and body.
fn split_answer(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {head:?}"));
    (status, body.to_owned())
}

/// Sends a normal request every 100 ms until `stop` is set (at most 300 of them); returns each one's
/// latency. Panics on an answer other than 200.
fn keep_serving(base: String, stop: Arc<AtomicBool>) -> JoinHandle<Vec<Duration>> {
    tokio::spawn(async move {
        let c = client();
        let mut latencies = Vec::new();
        for _ in 0..300 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let sent = Instant::now();
            let status = c
                .get(format!("{base}/health"))
                .send()
                .await
                .expect("answers")
                .status();
            assert_eq!(status, StatusCode::OK);
            latencies.push(sent.elapsed());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        latencies
    })
}

/// Asserts that each of `streams` is closed by the server no earlier than `timeout` after `started`
/// (minus a little for the clock) and no later than `timeout` + [`SLACK`]; returns what each received.
async fn closed_at(streams: Vec<TcpStream>, started: Instant, timeout: Duration) -> Vec<Vec<u8>> {
    let closing: Vec<_> = streams
        .into_iter()
        .map(|mut s| tokio::spawn(async move { read_until_closed(&mut s, timeout + SLACK).await }))
        .collect();
    let mut answers = Vec::new();
    for handle in closing {
        answers.push(handle.await.expect("joins"));
    }
    let closed_after = started.elapsed();
    assert!(
        closed_after + Duration::from_millis(100) >= timeout,
        "closed after {closed_after:?}, before the timeout {timeout:?}"
    );
    answers
}

/// Asserts that `answer` is the JSON 408 of request headers that missed their timeout.
fn assert_late_headers_408(answer: &[u8]) {
    let (status, body) = split_answer(answer);
    assert_eq!(status, 408, "{body}");
    assert_openai_error(&body, "headers did not arrive within 1000 ms");
}

const HALF_HEADERS: &[u8] = b"POST /v1/completions HTTP/1.1\r\nHost: strata\r\nContent-Ty";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_headers_and_a_half_sent_body_are_cut_at_their_timeouts_while_others_are_served()
{
    let limits = short_limits();
    let server = Running::start(engine_router(ServerOptions::new(MODEL)), limits).await;
    let stop = Arc::new(AtomicBool::new(false));
    let others = keep_serving(server.base.clone(), stop.clone());
    let started = Instant::now();
    let mut half_headers = Vec::new();
    for _ in 0..50 {
        half_headers.push(send_raw(server.addr, HALF_HEADERS).await);
    }
    let half_body = b"POST /v1/completions HTTP/1.1\r\nHost: strata\r\n\
        Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":";
    let mut half_body = send_raw(server.addr, half_body).await;
    let body_sent = Instant::now();
    for answer in closed_at(half_headers, started, limits.header_timeout).await {
        assert_late_headers_408(&answer);
    }
    let answer = read_until_closed(&mut half_body, limits.body_timeout + SLACK).await;
    let (status, body) = split_answer(&answer);
    assert_eq!(status, 408, "{body}");
    assert_openai_error(&body, "did not arrive within 1000 ms");
    assert!(body_sent.elapsed() + Duration::from_millis(100) >= limits.body_timeout);
    stop.store(true, Ordering::Relaxed);
    let latencies = others.await.expect("joins");
    assert!(latencies.len() >= 5, "{latencies:?}");
    let slowest = latencies.iter().max().copied().unwrap_or_default();
    assert!(
        slowest < Duration::from_millis(500),
        "a normal request took {slowest:?} beside the half-sent ones"
    );
    assert_eq!(
        normal_completion(&client(), &server.base).await,
        StatusCode::OK
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_headers_get_a_json_431_on_the_server_and_the_gateway() {
    let server = Running::start(
        engine_router(ServerOptions::new(MODEL)),
        ListenerLimits::default(),
    )
    .await;
    let upstream = Upstream::start(Duration::ZERO).await;
    let gateway = start_gateway(&upstream.base, short_limits()).await;
    let c = client();
    let big = "x".repeat(40_000);
    for (base, path) in [
        (&server.base, "/v1/completions"),
        (&gateway.base, "/v1/chat/completions"),
    ] {
        let answer = c
            .post(format!("{base}{path}"))
            .header("x-padding", &big)
            .json(&json!({"model": MODEL, "prompt": "x"}))
            .send()
            .await
            .expect("answers");
        assert_eq!(answer.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        assert_openai_error(&answer.text().await.expect("body"), "exceed 32768 bytes");
        let mut many = c.get(format!("{base}/v1/models"));
        for i in 0..150 {
            many = many.header(format!("x-field-{i}"), "1");
        }
        let answer = many.send().await.expect("answers");
        assert_eq!(answer.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        assert_openai_error(&answer.text().await.expect("body"), "header fields");
    }
    assert_eq!(normal_completion(&c, &server.base).await, StatusCode::OK);
    let answer = gateway_chat(&c, &gateway.base, false).await;
    assert_eq!(answer.status(), StatusCode::OK);
    gateway.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_get_openai_errors_naming_the_problem() {
    let server = Running::start(
        engine_router(ServerOptions::new(MODEL)),
        ListenerLimits::default(),
    )
    .await;
    let c = client();
    let models: Value = c
        .get(format!("{}/v1/models", server.base))
        .send()
        .await
        .expect("answers")
        .json()
        .await
        .expect("JSON");
    let context = models["data"][0]["context_length"]
        .as_u64()
        .expect("context length") as usize;
    let deep = format!(
        r#"{{"model":"tiny","prompt":"x","stop":{}{}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let mut not_utf8 = br#"{"model":"tiny","prompt":""#.to_vec();
    not_utf8.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    not_utf8.extend_from_slice(br#""}"#);
    let too_long = json!({"model": MODEL, "prompt": "cat ".repeat(4 * context), "max_tokens": 1});
    let cases: Vec<(Vec<u8>, &str, Option<&str>)> = vec![
        (deep.into_bytes(), "recursion limit exceeded", None),
        (not_utf8, "invalid unicode", None),
        (
            br#"{"model":"tiny","prompt":"x","temperature":3}"#.to_vec(),
            "between 0 and 2",
            Some("temperature"),
        ),
        (
            br#"{"model":"tiny","prompt":"x","max_tokens":-1}"#.to_vec(),
            "expected u32",
            Some("max_tokens"),
        ),
        (
            br#"{"model":"tiny","prompt":"x","top_p":1e400}"#.to_vec(),
            "number out of range",
            None,
        ),
        (
            too_long.to_string().into_bytes(),
            "maximum context length",
            Some("prompt"),
        ),
    ];
    for (body, needle, param) in cases {
        let shown = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        let answer = c
            .post(format!("{}/v1/completions", server.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("answers");
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{shown}");
        let v = assert_openai_error(&answer.text().await.expect("body"), needle);
        if let Some(param) = param {
            assert_eq!(v["error"]["param"], param, "{shown}");
        }
    }
    assert_eq!(normal_completion(&c, &server.base).await, StatusCode::OK);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_body_leaves_nothing_running() {
    let server = Running::start(
        engine_router(ServerOptions::new(MODEL)),
        ListenerLimits::default(),
    )
    .await;
    for _ in 0..10 {
        let half_body = b"POST /v1/completions HTTP/1.1\r\nHost: strata\r\n\
            Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":";
        drop(send_raw(server.addr, half_body).await);
    }
    let c = client();
    assert_eq!(normal_completion(&c, &server.base).await, StatusCode::OK);
    // The completed request leaves the scheduler just after its answer is sent: wait for that, briefly.
    let deadline = Instant::now() + Duration::from_secs(5);
    let counts = loop {
        let health: Value = c
            .get(format!("{}/health", server.base))
            .send()
            .await
            .expect("answers")
            .json()
            .await
            .expect("JSON");
        let counts = (health["waiting"].as_u64(), health["running"].as_u64());
        if counts == (Some(0), Some(0)) || Instant::now() > deadline {
            break counts;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(counts, (Some(0), Some(0)));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_close_at_the_idle_timeout_and_the_cap_holds_new_ones_back() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let url = strata_controller::store::sqlite_url(&dir.path().join("strata.db"));
    let store = strata_controller::store::open(&url).await.expect("store");
    let limits = ListenerLimits {
        header_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(1),
        max_connections: 4,
        ..ListenerLimits::default()
    };
    let dashboard = Running::start(strata_web::dashboard::router(store), limits).await;
    let started = Instant::now();
    let mut idle = Vec::new();
    for _ in 0..limits.max_connections {
        idle.push(TcpStream::connect(dashboard.addr).await.expect("connects"));
    }
    // A fifth connection waits for a slot: it is served once the idle ones are closed.
    let c = client();
    let answer = c
        .get(format!("{}/api/configs", dashboard.base))
        .send()
        .await
        .expect("answers");
    assert_eq!(answer.status(), StatusCode::OK);
    let waited = started.elapsed();
    assert!(
        waited + Duration::from_millis(100) >= limits.idle_timeout
            && waited < limits.idle_timeout + SLACK,
        "served after {waited:?}"
    );
    for answer in closed_at(idle, started, limits.idle_timeout).await {
        assert!(
            answer.is_empty(),
            "an idle connection closes without an answer"
        );
    }
    // A kept-alive connection is closed once idle for the timeout, not before.
    let mut kept = send_raw(
        dashboard.addr,
        b"GET /api/nothing HTTP/1.1\r\nHost: strata\r\n\r\n",
    )
    .await;
    let sent = Instant::now();
    let answer = read_until_closed(&mut kept, limits.idle_timeout + SLACK).await;
    assert!(sent.elapsed() + Duration::from_millis(100) >= limits.idle_timeout);
    let (status, body) = split_answer(&answer);
    assert_eq!(status, 404, "{body}");
    let answer = c
        .get(format!("{}/api/configs", dashboard.base))
        .send()
        .await
        .expect("answers");
    assert_eq!(answer.status(), StatusCode::OK);
    dashboard.stop().await;
}

/// An upstream for the gateway: chat answers, streamed as three events `gap` apart.
struct Upstream {
    base: String,
    _task: JoinHandle<()>,
}

impl Upstream {
    async fn start(gap: Duration) -> Self {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let base = format!("http://{}", tcp.local_addr().expect("address"));
        let app = Router::new()
            .route("/v1/chat/completions", post(upstream_chat))
            .route(
                "/v1/models",
                get(|| async { Json(json!({"data": [{"id": "m"}]})) }),
            )
            .with_state(gap);
        let task = tokio::spawn(async move {
            let _ = axum::serve(tcp, app).await;
        });
        Self { base, _task: task }
    }
}

async fn upstream_chat(State(gap): State<Duration>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    if request["stream"] != true {
        return Json(json!({
            "id": "c", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
        }))
        .into_response();
    }
    let events = ["one", "two", "three"].into_iter().map(|word| {
        let chunk = json!({"id": "c", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": null}]});
        format!("data: {chunk}\n\n")
    });
    let events = events.chain(["data: [DONE]\n\n".to_owned()]);
    let stream = futures_util::stream::iter(events).then(move |event| async move {
        tokio::time::sleep(gap).await;
        Ok::<_, std::io::Error>(Bytes::from(event))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A gateway with one CPU pool before `upstream`, its listener under `limits` (set through the
/// config's `[listener]` table).
async fn start_gateway(upstream: &str, limits: ListenerLimits) -> Running {
    let toml = format!(
        r#"
listen = "127.0.0.1:0"
default_class = "lax"

[listener]
header_timeout_ms = {header}
body_timeout_ms = {body}
idle_timeout_ms = {idle}
max_connections = {connections}

[health]
interval_ms = 0

[[class]]
name = "lax"
e2e_p99_ms = 600000

[[pool]]
name = "cpu"
kind = "cpu"
models = ["m"]
price_per_hour_usd = 0.36
tokens_per_s = 100
first_byte_timeout_ms = 10000
idle_timeout_ms = 10000
service = {{ slots = 8, prefill_tokens_per_s = 100000.0, tpot_by_batch = [[1.0, 0.001]], copies = 1.0 }}

[[pool.endpoint]]
url = "{upstream}"
"#,
        header = limits.header_timeout.as_millis(),
        body = limits.body_timeout.as_millis(),
        idle = limits.idle_timeout.as_millis(),
        connections = limits.max_connections,
    );
    let env: HashMap<String, String> = HashMap::new();
    let config = GatewayConfig::from_toml(&toml, &env as &dyn Source).expect("valid config");
    assert_eq!(config.listener, limits, "the [listener] table is read");
    let state = GatewayState::new(config, None, None).expect("state");
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let addr = tcp.local_addr().expect("address");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(gateway::serve(state, tcp, async {
        let _ = stopped.await;
    }));
    Running::new(addr, stop, task)
}

async fn gateway_chat(c: &reqwest::Client, base: &str, stream: bool) -> reqwest::Response {
    c.post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": "m", "stream": stream, "max_tokens": 3,
                      "messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .expect("the gateway answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_loris_on_the_gateway_is_cut_at_the_header_timeout_and_a_slow_body_gets_a_json_408()
{
    let upstream = Upstream::start(Duration::ZERO).await;
    let gateway = start_gateway(&upstream.base, short_limits()).await;
    let timeout = Duration::from_secs(1);
    let started = Instant::now();
    let trickle = "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Padding: ";
    let mut loris = Vec::new();
    for _ in 0..20 {
        loris.push(TcpStream::connect(gateway.addr).await.expect("connects"));
    }
    // Each connection gets one more header byte every 100 ms, which no per-read timeout would cut;
    // the header timeout runs from the first byte. At most 5 s of trickle.
    let mut cut = 0;
    for byte in trickle.bytes().cycle().take(50) {
        for stream in &mut loris {
            if stream.write_all(&[byte]).await.is_err() {
                cut += 1;
            }
        }
        if cut == loris.len() {
            break;
        }
        cut = 0;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for answer in closed_at(loris, started, timeout).await {
        // The 408 may be lost to the reset of a byte sent after the server closed.
        if !answer.is_empty() {
            assert_late_headers_408(&answer);
        }
    }
    assert!(
        started.elapsed() < timeout + 2 * SLACK,
        "the trickle was cut after {:?}",
        started.elapsed()
    );
    // A body sent a few bytes at a time past the body timeout gets a 408 on the API path.
    let mut slow_body = send_raw(
        gateway.addr,
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
          Content-Length: 64\r\n\r\n",
    )
    .await;
    // A byte every 100 ms for 0.8 s, then nothing: no byte is in flight when the 408 goes out.
    for _ in 0..8 {
        slow_body
            .write_all(b" ")
            .await
            .expect("the body is still read");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer = read_until_closed(&mut slow_body, timeout + SLACK).await;
    let (status, body) = split_answer(&answer);
    assert_eq!(status, 408, "{body}");
    assert_openai_error(&body, "did not arrive within 1000 ms");
    let answer = gateway_chat(&client(), &gateway.base, false).await;
    assert_eq!(answer.status(), StatusCode::OK);
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_outlasting_every_listener_timeout_is_not_cut() {
    // Four gaps of 600 ms: 2.4 s of stream, against 500 ms header, body and idle timeouts.
    let upstream = Upstream::start(Duration::from_millis(600)).await;
    let half_second = Duration::from_millis(500);
    let limits = ListenerLimits {
        header_timeout: half_second,
        body_timeout: half_second,
        idle_timeout: half_second,
        ..short_limits()
    };
    let gateway = start_gateway(&upstream.base, limits).await;
    let started = Instant::now();
    let answer = gateway_chat(&client(), &gateway.base, true).await;
    assert_eq!(answer.status(), StatusCode::OK);
    let text = answer.text().await.expect("the whole stream");
    assert!(
        started.elapsed() >= Duration::from_millis(2400),
        "{:?}",
        started.elapsed()
    );
    for word in ["one", "two", "three"] {
        assert!(text.contains(word), "{word} missing from {text}");
    }
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let answer = gateway_chat(&client(), &gateway.base, false).await;
    assert_eq!(answer.status(), StatusCode::OK);
    gateway.stop().await;
}
