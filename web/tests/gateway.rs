//! The gateway over real loopback sockets against small in-process mock upstreams: SLA routing by load,
//! budget thresholds, failures before the first byte (500s, hangs, a killed server), resets mid-stream,
//! usage accounting with the store down, admin and client auth, and a load of a few thousand requests
//! whose outcomes are counted one by one.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
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
use strata_controller::{
    pilot::{GpuEndpoint, ReplayGateway},
    planning::{ProfileSelector, stored_service_curve},
    store::{
        self, NewConfig, NewGatewayDecision, NewLedgerEntry, NewModel, NewPlan, NewWorkload, Store,
        TimeWindow,
    },
};
use strata_web::gateway::{
    self, GatewayState,
    accounting::{Sink, StoreSink},
    config::{GatewayConfig, Source},
};

use strata_planner::workload::{GpuFallback, GpuPricing};

#[path = "common/seed.rs"]
mod seed;

/// How a mock upstream behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Answers after `delay`.
    Fast,
    /// Answers 500.
    Fail,
    /// Never answers.
    Hang,
    /// Streams one chunk then resets; a JSON answer is cut off mid-body.
    Reset,
}

struct Mock {
    mode: Mode,
    delay: Duration,
    /// Ids of requests answered in full, in order.
    answered: Mutex<Vec<String>>,
    hits: AtomicUsize,
}

/// A mock upstream on its own runtime thread: dropping or killing it closes every connection.
struct MockServer {
    url: String,
    mock: Arc<Mock>,
    kill: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MockServer {
    fn start(mode: Mode, delay: Duration) -> Self {
        let mock = Arc::new(Mock {
            mode,
            delay,
            answered: Mutex::new(Vec::new()),
            hits: AtomicUsize::new(0),
        });
        let (kill, killed) = tokio::sync::oneshot::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel();
        let m = mock.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                tx.send(listener.local_addr().expect("addr")).expect("send");
                let app = Router::new()
                    .route("/v1/chat/completions", post(mock_chat))
                    .route("/v1/completions", post(mock_chat))
                    .route("/v1/models", get(mock_models))
                    .with_state(m);
                tokio::select! {
                    _ = axum::serve(listener, app) => {},
                    _ = killed => {},
                }
            });
            // Dropping the runtime ends every connection task: the server is gone, mid-request or not.
            rt.shutdown_background();
        });
        let addr = rx.recv().expect("mock address");
        Self {
            url: format!("http://{addr}"),
            mock,
            kill: Some(kill),
            thread: Some(thread),
        }
    }

    fn kill(&mut self) {
        if let Some(k) = self.kill.take() {
            let _ = k.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn answered(&self) -> Vec<String> {
        self.mock.answered.lock().unwrap().clone()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn mock_models(State(m): State<Arc<Mock>>) -> Response {
    if m.mode == Mode::Fail {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    if m.mode == Mode::Hang {
        std::future::pending::<()>().await;
    }
    Json(json!({"object": "list", "data": [{"id": "m", "object": "model"}]})).into_response()
}

async fn mock_chat(State(m): State<Arc<Mock>>, body: Bytes) -> Response {
    m.hits.fetch_add(1, Ordering::Relaxed);
    let v: Value = serde_json::from_slice(&body).unwrap_or_default();
    let id = v["user"].as_str().unwrap_or("").to_owned();
    match m.mode {
        Mode::Fail => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({"error": {"message": "boom"}})),
            )
                .into_response();
        }
        Mode::Hang => std::future::pending::<()>().await,
        Mode::Fast | Mode::Reset => {}
    }
    if !m.delay.is_zero() {
        tokio::time::sleep(m.delay).await;
    }
    let stream = v["stream"].as_bool().unwrap_or(false);
    let usage = json!({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10});
    if !stream {
        let body = json!({
            "id": id, "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": id}, "finish_reason": "stop"}],
            "usage": usage,
        });
        if m.mode == Mode::Reset {
            let text = body.to_string();
            let half = Bytes::from(text[..text.len() / 2].to_owned());
            let parts: Vec<Result<Bytes, std::io::Error>> =
                vec![Ok(half), Err(std::io::Error::other("reset"))];
            return Response::builder()
                .header("content-type", "application/json")
                .body(Body::from_stream(futures_util::stream::iter(parts)))
                .unwrap();
        }
        m.answered.lock().unwrap().push(id);
        return Json(body).into_response();
    }
    let include_usage = v["stream_options"]["include_usage"].as_bool() == Some(true);
    let chunk = |content: &str| {
        let mut c = json!({"id": id, "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]});
        if include_usage {
            c["usage"] = Value::Null;
        }
        Ok::<_, std::io::Error>(Bytes::from(format!("data: {c}\n\n")))
    };
    let mut parts = vec![chunk(&id), chunk(" and"), chunk(" more")];
    if m.mode == Mode::Reset {
        parts.truncate(1);
        parts.push(Err(std::io::Error::other("reset")));
    } else {
        if include_usage {
            let u =
                json!({"id": id, "object": "chat.completion.chunk", "choices": [], "usage": usage});
            parts.push(Ok(Bytes::from(format!("data: {u}\n\n"))));
        }
        parts.push(Ok(Bytes::from_static(b"data: [DONE]\n\n")));
        m.answered.lock().unwrap().push(id);
    }
    // A reset comes a moment after the first chunk, so that the chunk is on the wire first.
    let delay = if m.mode == Mode::Reset {
        Duration::from_millis(200)
    } else {
        m.delay
    };
    let body = futures_util::stream::iter(parts).then(move |p| async move {
        if !delay.is_zero() {
            tokio::time::sleep(delay / 4).await;
        }
        p
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(body))
        .unwrap()
}

/// A sink that keeps rows in memory and fails while `down` is set.
#[derive(Default)]
struct FakeStore {
    down: AtomicBool,
    decisions: Mutex<Vec<NewGatewayDecision>>,
    ledger: Mutex<Vec<NewLedgerEntry>>,
}

#[async_trait]
impl Sink for FakeStore {
    async fn decision(&self, row: &NewGatewayDecision) -> Result<(), String> {
        if self.down.load(Ordering::Relaxed) {
            return Err("down".into());
        }
        self.decisions.lock().unwrap().push(row.clone());
        Ok(())
    }
    async fn ledger(&self, row: &NewLedgerEntry) -> Result<(), String> {
        if self.down.load(Ordering::Relaxed) {
            return Err("down".into());
        }
        self.ledger.lock().unwrap().push(row.clone());
        Ok(())
    }
    async fn spent(&self, _: TimeWindow) -> Result<f64, String> {
        if self.down.load(Ordering::Relaxed) {
            return Err("down".into());
        }
        Ok(self
            .ledger
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.amount_usd)
            .sum())
    }
    async fn plan(&self, _: &str) -> Result<Option<Value>, String> {
        Ok(None)
    }
}

struct Gateway {
    base: String,
    state: Arc<GatewayState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Gateway {
    async fn start(toml: &str, sink: Option<Arc<dyn Sink>>) -> Self {
        let env: HashMap<String, String> = [
            ("ADMIN".to_owned(), "admin-token-0123456789".to_owned()),
            ("APP_KEY".to_owned(), "app-key".to_owned()),
            ("SLOW_KEY".to_owned(), "slow-key".to_owned()),
        ]
        .into();
        let mut config = GatewayConfig::from_toml(toml, &env as &dyn Source).expect("valid config");
        config
            .resolve_stored_profiles(sink.as_deref())
            .await
            .expect("stored profiles resolve");
        let state = GatewayState::new(config, sink, None).expect("state");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(gateway::serve(state.clone(), listener, async {
            let _ = stopped.await;
        }));
        Self {
            base,
            state,
            stop: Some(stop),
            task: Some(task),
        }
    }

    async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.expect("joins");
        }
    }
}

/// A config with one CPU pool of `cpu` endpoints and one GPU pool of `gpu` endpoints; `extra` is
/// appended (classes, budget, keys).
fn config(cpu: &[&str], gpu: &[&str], slots: u32, extra: &str) -> String {
    let mut s = format!(
        r#"
listen = "127.0.0.1:0"
default_class = "lax"
admin_token_env = "ADMIN"
max_body_bytes = 65536

[retry]
attempts = 4
backoff_ms = 1

[breaker]
failures = 3
open_ms = 60000

[health]
interval_ms = 0

[store]
flush_ms = 10
batch = 64

[[class]]
name = "lax"
e2e_p99_ms = 600000
priority = 1

[[class]]
name = "tight"
ttft_p99_ms = 150
priority = 2

[[class]]
name = "cheap"
e2e_p99_ms = 600000
priority = 0

[[pool]]
name = "cpu"
kind = "cpu"
models = ["m"]
max_concurrency = {slots}
price_per_hour_usd = 0.36
tokens_per_s = 100
first_byte_timeout_ms = 1000
idle_timeout_ms = 1000
service = {{ slots = {slots}, prefill_tokens_per_s = 100000.0, tpot_by_batch = [[1.0, 0.2]], copies = 1.0 }}
"#
    );
    for u in cpu {
        s.push_str(&format!("[[pool.endpoint]]\nurl = \"{u}\"\n"));
    }
    if !gpu.is_empty() {
        s.push_str(
            r#"
[[pool]]
name = "gpu"
kind = "gpu"
models = ["m"]
price_per_million_tokens_usd = 1000.0
ttft_p99_ms = 50
tpot_p99_ms = 1
first_byte_timeout_ms = 300
idle_timeout_ms = 1000
"#,
        );
    }
    for u in gpu {
        s.push_str(&format!("[[pool.endpoint]]\nurl = \"{u}\"\n"));
    }
    s.push_str(extra);
    s
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

fn chat(id: &str, stream: bool) -> Value {
    json!({"model": "m", "user": id, "stream": stream, "max_tokens": 3,
           "messages": [{"role": "user", "content": "hello"}]})
}

async fn send(
    c: &reqwest::Client,
    base: &str,
    class: &str,
    body: &Value,
) -> (StatusCode, String, String) {
    send_with(c, base, &[("x-strata-sla", class)], body).await
}

/// A chat completion with `headers`: its status, `x-strata-route` and body.
async fn send_with(
    c: &reqwest::Client,
    base: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (StatusCode, String, String) {
    let mut request = c.post(format!("{base}/v1/chat/completions")).json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let r = request.send().await.expect("the gateway answers");
    let status = r.status();
    let route = r
        .headers()
        .get("x-strata-route")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, route, r.text().await.unwrap_or_default())
}

async fn dry_run(c: &reqwest::Client, base: &str, class: &str) -> Value {
    c.post(format!("{base}/v1/route"))
        .header("x-strata-sla", class)
        .json(&chat("dry", false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tight_sla_goes_to_gpu_when_the_cpu_pool_is_loaded_and_to_cpu_when_idle() {
    let cpu = MockServer::start(Mode::Fast, Duration::from_millis(250));
    let gpu = MockServer::start(Mode::Fast, Duration::ZERO);
    let gw = Gateway::start(&config(&[&cpu.url], &[&gpu.url], 2, ""), None).await;
    let c = client();
    let d = dry_run(&c, &gw.base, "tight").await;
    assert_eq!(d["target"], "cpu", "{d}");
    assert_eq!(d["reasons"][0]["code"], "cpu_meets_sla");
    let (status, route, _) = send(&c, &gw.base, "tight", &chat("idle", false)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(route.starts_with("pool=cpu;"), "{route}");
    // Load the CPU pool with lax requests (they stay on CPU whatever the load).
    let load: Vec<_> = (0..6)
        .map(|i| {
            let c = c.clone();
            let base = gw.base.clone();
            tokio::spawn(
                async move { send(&c, &base, "lax", &chat(&format!("load{i}"), false)).await },
            )
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let d = dry_run(&c, &gw.base, "tight").await;
    assert_eq!(d["target"], "gpu", "{d}");
    let (status, route, body) = send(&c, &gw.base, "tight", &chat("busy", false)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        route.starts_with("pool=gpu;") && route.contains("cpu_predicted_miss"),
        "{route}"
    );
    for l in load {
        let (status, route, _) = l.await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert!(route.starts_with("pool=cpu;"), "{route}");
    }
    assert_eq!(gpu.answered(), vec!["busy".to_owned()]);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_policy_switches_routing_past_its_thresholds() {
    let cpu = MockServer::start(Mode::Fast, Duration::from_millis(250));
    let gpu = MockServer::start(Mode::Fast, Duration::ZERO);
    // GPU costs $1000 per 1M tokens: one answer (10 tokens) costs $0.01, the day's budget is $0.025.
    let budget = r#"
[budget]
per_day_usd = 0.025
[[budget.action]]
action = "cap_gpu_share"
at_spent_fraction = 0.3
max_share = 0.0
[[budget.action]]
action = "reject_below_priority"
at_spent_fraction = 0.3
priority = 1
"#;
    let gw = Gateway::start(&config(&[&cpu.url], &[&gpu.url], 1, budget), None).await;
    let c = client();
    // Keep the CPU busy so tight requests overflow to GPU.
    let hold = {
        let c = c.clone();
        let base = gw.base.clone();
        tokio::spawn(async move { send(&c, &base, "lax", &chat("hold", false)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let d = dry_run(&c, &gw.base, "cheap").await;
    assert_eq!(
        d["target"], "cpu",
        "priority 0 is served under the threshold: {d}"
    );
    let (_, route, _) = send(&c, &gw.base, "tight", &chat("g1", false)).await;
    assert!(route.starts_with("pool=gpu;"), "under budget: {route}");
    // $0.01 of 0.025 spent = 40% > 30%: GPU capped, the lowest priority rejected.
    let d = dry_run(&c, &gw.base, "tight").await;
    assert_eq!(d["target"], "cpu", "{d}");
    assert!(d["reasons"].to_string().contains("gpu_share_capped"), "{d}");
    let (status, _, body) = send(&c, &gw.base, "cheap", &chat("c2", false)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(body.contains("budget_exceeded"), "{body}");
    hold.await.unwrap();
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_before_the_first_byte_are_retried_elsewhere_and_open_breakers() {
    let bad = MockServer::start(Mode::Fail, Duration::ZERO);
    let hang = MockServer::start(Mode::Hang, Duration::ZERO);
    let good = MockServer::start(Mode::Fast, Duration::ZERO);
    let gw = Gateway::start(
        &config(
            &[&bad.url, &hang.url, &good.url],
            &[&good.url.replace("127.0.0.1", "localhost")],
            64,
            "",
        ),
        None,
    )
    .await;
    let c = client();
    for i in 0..30 {
        let (status, route, body) =
            send(&c, &gw.base, "lax", &chat(&format!("r{i}"), i % 2 == 0)).await;
        assert_eq!(status, StatusCode::OK, "{route} {body}");
        assert!(body.contains(&format!("r{i}")), "{body}");
    }
    let metrics = c
        .get(format!("{}/metrics", gw.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("strata_gateway_retries_total"),
        "{metrics}"
    );
    let open = metrics
        .lines()
        .filter(|l| l.starts_with("strata_gateway_breaker_state") && l.ends_with(" 2"))
        .count();
    assert_eq!(
        open, 2,
        "the failing and the hanging endpoint are open: {metrics}"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_mid_stream_ends_in_a_clean_error_event() {
    let reset = MockServer::start(Mode::Reset, Duration::ZERO);
    let gw = Gateway::start(&config(&[&reset.url], &[], 4, ""), None).await;
    let c = client();
    let (status, _, body) = send(&c, &gw.base, "lax", &chat("s1", true)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.starts_with("data: "), "{body}");
    assert!(body.contains("s1"), "the first chunk went through: {body}");
    assert!(
        body.trim_end().ends_with("\"code\":\"upstream_error\"}}"),
        "{body}"
    );
    assert!(!body.contains("[DONE]"));
    // A JSON answer cut mid-body is retried; with no other endpoint it ends in a clean 502.
    let (status, _, body) = send(&c, &gw.base, "lax", &chat("j1", false)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    let v: Value = serde_json::from_str(&body).expect("an OpenAI error body");
    assert_eq!(v["error"]["code"], "upstream_error");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_asked_for_streams_and_the_ledger_survives_a_store_outage() {
    let fast = MockServer::start(Mode::Fast, Duration::ZERO);
    let store = Arc::new(FakeStore::default());
    store.down.store(true, Ordering::Relaxed);
    let gw = Gateway::start(
        &config(&[&fast.url], &[], 4, ""),
        Some(store.clone() as Arc<dyn Sink>),
    )
    .await;
    let c = client();
    let (status, _, body) = send(&c, &gw.base, "lax", &chat("u1", true)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !body.contains("prompt_tokens"),
        "the injected usage event is dropped: {body}"
    );
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    let mut asked = chat("u2", true);
    asked["stream_options"] = json!({"include_usage": true});
    let (_, _, body) = send(&c, &gw.base, "lax", &asked).await;
    assert!(
        body.contains("\"completion_tokens\":3"),
        "kept when asked: {body}"
    );
    for i in 0..10 {
        send(&c, &gw.base, "lax", &chat(&format!("n{i}"), false)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(store.decisions.lock().unwrap().is_empty());
    let mut queued = 0;
    for _ in 0..50 {
        queued = gw.state.accounting.queued();
        if queued == 12 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(queued, 12, "rows wait while the store is down");
    store.down.store(false, Ordering::Relaxed);
    for _ in 0..100 {
        if store.decisions.lock().unwrap().len() == 12 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let decisions = store.decisions.lock().unwrap().clone();
    assert_eq!(decisions.len(), 12);
    assert!(
        decisions
            .iter()
            .all(|d| d.prompt_tokens == 7 && d.output_tokens == 3),
        "{decisions:?}"
    );
    let ledger: i64 = store.ledger.lock().unwrap().iter().map(|e| e.tokens).sum();
    assert_eq!(ledger, 120);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_limits_admin_and_models() {
    let fast = MockServer::start(Mode::Fast, Duration::ZERO);
    let gpu = MockServer::start(Mode::Fast, Duration::ZERO);
    let keys = r#"
[[api_key]]
name = "app"
key_env = "APP_KEY"
class = "tight"
[[api_key]]
name = "slow"
key_env = "SLOW_KEY"
rate_per_s = 0.001
burst = 2
"#;
    let gw = Gateway::start(&config(&[&fast.url], &[&gpu.url], 4, keys), None).await;
    let c = client();
    let post = |key: &str| {
        c.post(format!("{}/v1/chat/completions", gw.base))
            .bearer_auth(key)
            .json(&chat("k", false))
    };
    assert_eq!(
        post("wrong").send().await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        post("app-key").send().await.unwrap().status(),
        StatusCode::OK
    );
    for _ in 0..2 {
        assert_eq!(
            post("slow-key").send().await.unwrap().status(),
            StatusCode::OK
        );
    }
    assert_eq!(
        post("slow-key").send().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let big = json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(70_000)}]});
    let r = c
        .post(format!("{}/v1/chat/completions", gw.base))
        .bearer_auth("app-key")
        .json(&big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let r = c
        .post(format!("{}/v1/chat/completions", gw.base))
        .bearer_auth("app-key")
        .json(&json!({"model": "nope", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let models: Value = c
        .get(format!("{}/v1/models", gw.base))
        .bearer_auth("app-key")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "m");
    // Admin: a drained CPU pool sends everything to GPU.
    let drain = format!("{}/admin/pools/cpu/drain", gw.base);
    assert_eq!(
        c.post(&drain).send().await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        c.post(&drain)
            .bearer_auth("admin-token-0123456789")
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    let r = post("app-key").send().await.unwrap();
    let route = r.headers()["x-strata-route"].to_str().unwrap().to_owned();
    assert!(
        route.starts_with("pool=gpu;") && route.contains("no_cpu"),
        "{route}"
    );
    gw.shutdown().await;
}

/// Outcome of one request of the load test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Outcome {
    Complete,
    CleanError,
    Broken,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_with_faults_every_request_gets_one_complete_answer_or_a_clean_error() {
    const N: usize = 3000;
    let fast = MockServer::start(Mode::Fast, Duration::ZERO);
    let mut doomed = MockServer::start(Mode::Fast, Duration::from_millis(2));
    let fail = MockServer::start(Mode::Fail, Duration::ZERO);
    let hang = MockServer::start(Mode::Hang, Duration::ZERO);
    let reset = MockServer::start(Mode::Reset, Duration::ZERO);
    let gpu = MockServer::start(Mode::Fast, Duration::ZERO);
    let mut toml = config(
        &[&fast.url, &doomed.url, &fail.url, &hang.url, &reset.url],
        &[&gpu.url],
        1000,
        "",
    );
    // Breakers open slowly here so that faults keep being hit during the run.
    toml = toml.replace("failures = 3", "failures = 1000").replace(
        "first_byte_timeout_ms = 1000",
        "first_byte_timeout_ms = 300",
    );
    let gw = Gateway::start(&toml, None).await;
    let c = client();
    let sem = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = Vec::with_capacity(N);
    for i in 0..N {
        let c = c.clone();
        let base = gw.base.clone();
        let permit = sem.clone().acquire_owned().await.unwrap();
        if i == N / 3 {
            doomed.kill();
        }
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            let id = format!("req-{i}");
            let stream = i % 2 == 0;
            let (status, _, body) = send(&c, &base, "lax", &chat(&id, stream)).await;
            let outcome = if status == StatusCode::OK && stream {
                let own = body.contains(&format!("\"content\":\"{id}\""));
                if body.ends_with("data: [DONE]\n\n") && own && body.matches("[DONE]").count() == 1
                {
                    Outcome::Complete
                } else if own && body.trim_end().ends_with("\"code\":\"upstream_error\"}}") {
                    Outcome::CleanError
                } else {
                    Outcome::Broken
                }
            } else if status == StatusCode::OK {
                match serde_json::from_str::<Value>(&body) {
                    Ok(v) if v["choices"][0]["message"]["content"] == id.as_str() => {
                        Outcome::Complete
                    }
                    _ => Outcome::Broken,
                }
            } else {
                match serde_json::from_str::<Value>(&body) {
                    Ok(v) if v["error"]["message"].is_string() => Outcome::CleanError,
                    _ => Outcome::Broken,
                }
            };
            (id, outcome)
        }));
    }
    let mut counts: HashMap<Outcome, usize> = HashMap::new();
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        let (id, outcome) = t.await.expect("the request task finished");
        assert!(ids.insert(id.clone()), "{id} answered twice");
        *counts.entry(outcome).or_default() += 1;
    }
    let complete = counts.get(&Outcome::Complete).copied().unwrap_or(0);
    let clean = counts.get(&Outcome::CleanError).copied().unwrap_or(0);
    let broken = counts.get(&Outcome::Broken).copied().unwrap_or(0);
    eprintln!("{N} requests: {complete} complete, {clean} clean errors, {broken} broken");
    assert_eq!(ids.len(), N, "no request lost");
    assert_eq!(broken, 0);
    assert_eq!(complete + clean, N);
    // Only resets mid-stream (after the first byte) may end in an error: everything else was retried.
    assert!(complete >= N * 8 / 10, "{counts:?}");
    // Every complete answer came from exactly one upstream that finished it.
    let mut finished: HashMap<String, usize> = HashMap::new();
    // The killed server may have finished an answer it never delivered; the others were never cut off.
    for m in [&fast, &gpu] {
        for id in m.answered() {
            *finished.entry(id).or_default() += 1;
        }
    }
    let twice = finished.values().filter(|&&n| n > 1).count();
    assert_eq!(twice, 0, "an upstream answer was produced twice");
    assert!(finished.len() + doomed.answered().len() >= complete);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_in_flight_requests_and_flushes_accounting() {
    let slow = MockServer::start(Mode::Fast, Duration::from_millis(300));
    let store = Arc::new(FakeStore::default());
    let gw = Gateway::start(
        &config(&[&slow.url], &[], 8, ""),
        Some(store.clone() as Arc<dyn Sink>),
    )
    .await;
    let c = client();
    let pending: Vec<_> = (0..4)
        .map(|i| {
            let c = c.clone();
            let base = gw.base.clone();
            tokio::spawn(async move {
                send(&c, &base, "lax", &chat(&format!("d{i}"), i % 2 == 0)).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    gw.shutdown().await;
    for p in pending {
        let (status, _, body) = p.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    assert_eq!(
        store.decisions.lock().unwrap().len(),
        4,
        "flushed before exit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_health_checks_open_the_breaker_of_a_failing_endpoint() {
    let bad = MockServer::start(Mode::Fail, Duration::ZERO);
    let gpu = MockServer::start(Mode::Fast, Duration::ZERO);
    let toml = config(&[&bad.url], &[&gpu.url], 8, "").replace(
        "[health]\ninterval_ms = 0",
        "[health]\ninterval_ms = 20\ntimeout_ms = 200",
    );
    let gw = Gateway::start(&toml, None).await;
    let c = client();
    let mut target = Value::Null;
    for _ in 0..100 {
        target = dry_run(&c, &gw.base, "lax").await["target"].clone();
        if target == "gpu" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(target, "gpu", "the CPU endpoint failed its checks");
    assert_eq!(
        bad.mock.hits.load(Ordering::Relaxed),
        0,
        "no request was sent to it"
    );
    gw.shutdown().await;
}

/// The CPU pool's `endpoints_up` in the gateway's `/health`.
async fn cpu_endpoints_up(c: &reqwest::Client, base: &str) -> u64 {
    let health: Value = c
        .get(format!("{base}/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pools = health["pools"].as_array().expect("pools");
    let cpu = pools.iter().find(|p| p["name"] == "cpu").expect("cpu pool");
    cpu["endpoints_up"].as_u64().expect("endpoints_up")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_endpoint_stays_down_across_open_windows_and_gets_no_live_request() {
    let bad = MockServer::start(Mode::Fail, Duration::ZERO);
    let good = MockServer::start(Mode::Fast, Duration::ZERO);
    // Short open windows, so that many of them pass while the test runs.
    let toml = config(&[&bad.url, &good.url], &[], 8, "")
        .replace("open_ms = 60000", "open_ms = 50")
        .replace(
            "[health]\ninterval_ms = 0",
            "[health]\ninterval_ms = 20\ntimeout_ms = 200",
        );
    let gw = Gateway::start(&toml, None).await;
    let c = client();
    let mut up = 2;
    for _ in 0..100 {
        up = cpu_endpoints_up(&c, &gw.base).await;
        if up == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(up, 1, "the failing endpoint's checks opened its breaker");
    let bad_hits = bad.mock.hits.load(Ordering::Relaxed);
    let good_hits = good.mock.hits.load(Ordering::Relaxed);
    let until = std::time::Instant::now() + Duration::from_secs(3);
    let (mut samples, mut sent) = (0, 0usize);
    while std::time::Instant::now() < until {
        assert_eq!(
            cpu_endpoints_up(&c, &gw.base).await,
            1,
            "sample {samples}: the failing endpoint is reported down"
        );
        samples += 1;
        let (status, _, body) = send(&c, &gw.base, "lax", &chat(&format!("r{sent}"), false)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        sent += 1;
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    assert!(samples > 20, "only {samples} samples");
    assert_eq!(
        bad.mock.hits.load(Ordering::Relaxed) - bad_hits,
        0,
        "no live request went to the failing endpoint"
    );
    assert_eq!(good.mock.hits.load(Ordering::Relaxed) - good_hits, sent);
    gw.shutdown().await;
}

/// Sends `request` as raw bytes to `base` and returns the status line of the answer.
async fn raw_status(base: &str, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    stream.write_all(request).await.expect("sends");
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut answer))
        .await
        .expect("answers in time")
        .expect("reads");
    let text = String::from_utf8_lossy(&answer[..n]).into_owned();
    text.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_framing_oversized_bodies_and_wrong_methods_get_openai_errors() {
    let cpu = MockServer::start(Mode::Fast, Duration::ZERO);
    let gpu = MockServer::start(Mode::Fast, Duration::ZERO);
    let gw = Gateway::start(&config(&[&cpu.url], &[&gpu.url], 8, ""), None).await;
    let head =
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n";
    let bad_chunk = format!("{head}Transfer-Encoding: chunked\r\n\r\nzz\r\n{{}}\r\n0\r\n\r\n");
    let status = raw_status(&gw.base, bad_chunk.as_bytes()).await;
    assert!(status.starts_with("HTTP/1.1 400"), "{status}");
    let big = "x".repeat(70_000);
    let oversized = format!(
        "{head}Content-Length: {}\r\nConnection: close\r\n\r\n{big}",
        big.len()
    );
    let status = raw_status(&gw.base, oversized.as_bytes()).await;
    assert!(status.starts_with("HTTP/1.1 413"), "{status}");
    let c = client();
    let wrong_method = c
        .get(format!("{}/v1/chat/completions", gw.base))
        .send()
        .await
        .expect("answers");
    assert_eq!(wrong_method.status(), StatusCode::METHOD_NOT_ALLOWED);
    let body: Value = wrong_method.json().await.expect("a JSON error body");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let flood = "x".repeat(30_000);
    let (status, _, body) = send(&c, &gw.base, &flood, &chat("flood", false)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.len() < 1_000,
        "the class is not echoed whole: {} bytes",
        body.len()
    );
    let mut other = chat("other", false);
    other["model"] = json!("nope");
    let (status, _, body) = send(&c, &gw.base, "lax", &other).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("serves `m`\""), "each model once: {body}");
    let (status, _, body) = send(&c, &gw.base, "lax", &chat("after", false)).await;
    assert_eq!(status, StatusCode::OK, "still serves: {body}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_sharing_a_store_see_each_others_spend() {
    let cpu = MockServer::start(Mode::Fast, Duration::ZERO);
    let gpu = MockServer::start(Mode::Fast, Duration::ZERO);
    let store = Arc::new(FakeStore::default());
    let budget = r#"
[budget]
per_day_usd = 0.015
[[budget.action]]
action = "reject_below_priority"
at_spent_fraction = 0.5
priority = 1
"#;
    let toml = config(&[&cpu.url], &[&gpu.url], 8, budget)
        .replace("[store]\n", "[store]\nrefresh_ms = 100\n");
    let a = Gateway::start(&toml, Some(store.clone() as Arc<dyn Sink>)).await;
    let b = Gateway::start(&toml, Some(store.clone() as Arc<dyn Sink>)).await;
    let c = client();
    assert_eq!(dry_run(&c, &b.base, "cheap").await["target"], "cpu");
    // Replica A's CPU pool is drained, so its request goes to GPU: $0.01 of the $0.015 budget.
    let drained = c
        .post(format!("{}/admin/pools/cpu/drain", a.base))
        .bearer_auth("admin-token-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(drained.status(), StatusCode::OK);
    let (_, route, _) = send(&c, &a.base, "lax", &chat("spend", false)).await;
    assert!(route.starts_with("pool=gpu;"), "{route}");
    let mut seen = Value::Null;
    for _ in 0..50 {
        seen = dry_run(&c, &b.base, "cheap").await;
        if seen["target"] == "reject" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        seen["target"], "reject",
        "replica B reads A's spend from the store: {seen}"
    );
    assert_eq!(seen["status"], 429);
    a.shutdown().await;
    b.shutdown().await;
}

/// A measured q8_0 t2 b4 profile of SmolLM2 on one host, in `store`.
async fn store_a_profile(store: &dyn Store) -> ProfileSelector {
    let host = store
        .insert_hardware(&seed::hardware("fp-gateway"))
        .await
        .unwrap();
    let model = store
        .insert_model(&NewModel {
            name: "smollm2-135m-instruct".to_owned(),
            path: "smollm2.gguf".to_owned(),
            format: "gguf".to_owned(),
            sha256: "cc33".to_owned(),
            size_bytes: 94 << 20,
            parameters: None,
            synthetic: false,
        })
        .await
        .unwrap();
    let config = store
        .insert_config(&NewConfig {
            model_id: model.id,
            weight_type: "q8_0".to_owned(),
            threads: 2,
            max_batch: 4,
            numa_policy: "none".to_owned(),
            kv_memory_mib: 256,
        })
        .await
        .unwrap();
    for (minutes_ago, slow, tokens_per_s) in [(20, 1.0, 100.0), (10, 1.5, 300.0)] {
        store
            .insert_profile_run(&seed::run(
                config.id,
                host.id,
                minutes_ago,
                slow,
                tokens_per_s,
                "avx512_vnni",
            ))
            .await
            .unwrap();
    }
    ProfileSelector {
        model: model.name,
        weights: "q8_0".to_owned(),
        threads: 2,
        max_batch: 4,
        hardware: None,
    }
}

/// A real plan (the planner's golden example) recorded for workload `w`, whose first class is renamed
/// `cheap` and sent to the GPU in full during `gpu_hours` only.
async fn store_a_plan(store: &dyn Store, gpu_hours: &[u32]) {
    let mut plan: Value =
        serde_json::from_str(include_str!("../../planner/tests/golden/example.json")).unwrap();
    for hour in plan["hours"].as_array_mut().unwrap() {
        let h = hour["hour"].as_u64().unwrap() as u32;
        let class = &mut hour["classes"][0];
        class["class"] = json!("cheap");
        class["gpu_share"] = json!(if gpu_hours.contains(&h) { 1.0 } else { 0.0 });
    }
    let workload = match store.find_workload_by_name("w").await.unwrap() {
        Some(w) => w,
        None => store
            .insert_workload(&NewWorkload {
                name: "w".to_owned(),
                spec: json!({"name": "w"}),
            })
            .await
            .unwrap(),
    };
    store
        .insert_plan(&NewPlan {
            workload_id: workload.id,
            plan,
            total_cost_usd: 1.0,
            total_output_tokens: 1,
        })
        .await
        .unwrap();
}

/// `toml` with the CPU pool's service model replaced by the stored profile of SmolLM2 `weights` t2 b4.
fn with_stored_profile(toml: &str, weights: &str) -> String {
    let profile = format!(
        r#"profile = {{ model = "smollm2-135m-instruct", weights = "{weights}", threads = 2, max_batch = 4 }}"#
    );
    toml.lines()
        .map(|line| {
            if line.starts_with("service = ") {
                profile.as_str()
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Polls the dry run of `class` until it targets `target` (the plan is re-read every 100 ms).
async fn wait_for_target(c: &reqwest::Client, base: &str, class: &str, target: &str) -> Value {
    let mut seen = Value::Null;
    for _ in 0..60 {
        seen = dry_run(c, base, class).await;
        if seen["target"] == target {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    seen
}

/// The CPU pool's service model comes from the profile stored for its config, and the plan's GPU share
/// for the current UTC hour (not another hour's) comes from the latest plan in the same store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_models_and_the_current_plan_hour_are_read_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(&store::sqlite_url(&dir.path().join("strata.db")))
        .await
        .unwrap();
    let selector = store_a_profile(store.as_ref()).await;
    let hour = chrono::Timelike::hour(&chrono::Utc::now());
    // This hour and the next, so that the test holds across an hour boundary.
    store_a_plan(store.as_ref(), &[hour, (hour + 1) % 24]).await;

    let cpu = MockServer::start(Mode::Fast, Duration::ZERO);
    let gpu = MockServer::start(Mode::Fast, Duration::ZERO);
    let toml = with_stored_profile(&config(&[&cpu.url], &[&gpu.url], 4, ""), "q8_0")
        .replace("[store]\n", "[store]\nworkload = \"w\"\nrefresh_ms = 100\n");
    let sink: Arc<dyn Sink> = Arc::new(StoreSink(store.clone()));
    let gw = Gateway::start(&toml, Some(sink)).await;
    let expected = stored_service_curve(store.as_ref(), &selector)
        .await
        .unwrap();
    assert_eq!(
        gw.state.table().pools[0].config.service.as_ref(),
        Some(&expected)
    );
    assert_eq!(expected.slots, 4);

    let c = client();
    let planned = wait_for_target(&c, &gw.base, "cheap", "gpu").await;
    assert_eq!(planned["target"], "gpu", "{planned}");
    assert!(planned.to_string().contains("plan_gpu_share"), "{planned}");
    assert_eq!(dry_run(&c, &gw.base, "lax").await["target"], "cpu");

    // A newer plan that sends `cheap` to the GPU only in other hours: back on CPU.
    let elsewhere: Vec<u32> = (2..23).map(|d| (hour + d) % 24).collect();
    store_a_plan(store.as_ref(), &elsewhere).await;
    let unplanned = wait_for_target(&c, &gw.base, "cheap", "cpu").await;
    assert_eq!(unplanned["target"], "cpu", "{unplanned}");
    gw.shutdown().await;
}

/// A pool that names a profile the store does not hold, or a store-less gateway, is refused at start
/// naming the pool's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_stored_profile_is_refused_naming_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(&store::sqlite_url(&dir.path().join("strata.db")))
        .await
        .unwrap();
    store_a_profile(store.as_ref()).await;
    let toml = with_stored_profile(&config(&["http://127.0.0.1:9"], &[], 4, ""), "q4_1");
    let env: HashMap<String, String> =
        [("ADMIN".to_owned(), "admin-token-0123456789".to_owned())].into();
    let mut config = GatewayConfig::from_toml(&toml, &env as &dyn Source).expect("valid config");
    let sink = StoreSink(store.clone());
    let err = config
        .resolve_stored_profiles(Some(&sink))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("pool[0].profile: ")
            && err.contains("no stored profile of smollm2-135m-instruct q4_1 t2 b4"),
        "{err}"
    );
    let err = config
        .resolve_stored_profiles(None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pool[0].profile") && err.contains("needs the store"),
        "{err}"
    );
}

/// The gateway file the pilot writes for its replay validates as the gateway reads it: every class of
/// the workload, the engine's pool with its service model, and the GPU baseline with its key.
#[test]
fn the_pilots_replay_gateway_file_validates() {
    let workload = seed::example_workload();
    let profile = strata_planner::profile::ConfigProfile::list_from_json_str(
        r#"[{
  "id": "p", "model": "m", "weights": "q8_0", "threads": 2, "max_batch": 8,
  "measured_on": { "host": "h", "vcpus": 2, "mem_bandwidth_gbs": 29.0, "int8_gops": 400.0 },
  "load_curve": [
    { "rate_rps": 0.5, "ttft_p99_s": 0.4, "tpot_p99_s": 0.010, "e2e_p99_s": 1.4,
      "output_tokens_per_s": 10.0, "total_tokens_per_s": 80.0 }],
  "mean_prompt_tokens": 160.0, "mean_output_tokens": 17.0 }]"#,
    )
    .expect("a profile")
    .remove(0);
    let endpoint = GpuEndpoint {
        url: "http://127.0.0.1:9".into(),
        model: "m".into(),
        api_key_env: Some("GPU_KEY".into()),
    };
    let fallback = GpuFallback {
        name: "g2-standard-8".into(),
        pricing: GpuPricing::PerInstanceHour {
            hourly_cost: 0.72,
            output_tokens_per_s: 2000.0,
        },
        ttft_p99_s: 0.25,
        tpot_p99_s: 0.012,
    };
    let gateway = ReplayGateway {
        workload: &workload,
        profile: &profile,
        engine_url: "http://127.0.0.1:8",
        served: "m",
        host_hourly_usd: 0.5,
        gpu: Some((&endpoint, &fallback)),
    };
    let text = gateway.to_toml().expect("the file serializes");
    let env: HashMap<String, String> = [("GPU_KEY".to_owned(), "k".to_owned())].into();
    let config = GatewayConfig::from_toml(&text, &env).expect("the pilot's gateway file validates");
    let classes: Vec<&str> = config.classes.iter().map(|c| c.name.as_str()).collect();
    let expected: Vec<&str> = workload.classes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(classes, expected);
    assert_eq!(config.pools.len(), 2);
    assert_eq!(config.pools[0].service, gateway.file().pools[0].service);
    assert_eq!(config.pools[0].endpoints[0].url, "http://127.0.0.1:8");
    assert_eq!(config.pools[1].endpoints[0].api_key.as_deref(), Some("k"));
    assert_eq!(config.pools[1].gpu_ttft, Duration::from_millis(250));
    assert_eq!(
        (config.retry_attempts, config.health_interval),
        (1, Duration::ZERO)
    );
}

/// The CPU pool's config of [`config`] prefilling `tokens_per_s` prompt tokens a second.
fn prefilling_at(toml: &str, tokens_per_s: f64) -> String {
    let slow = format!("prefill_tokens_per_s = {tokens_per_s:?}");
    assert!(toml.contains("prefill_tokens_per_s = 100000.0"));
    toml.replace("prefill_tokens_per_s = 100000.0", &slow)
}

/// `x-slo-ttft-ms` and `x-slo-tpot-ms` set a request's own targets in place of its class's: a
/// 200 ms first token that the CPU pool is predicted to miss goes to the GPU pool, a loose one stays on
/// CPU, a per-token target below the CPU pool's pace goes to GPU too, and `x-strata-route` names the
/// targets that applied and where each came from. A target that is not a number is refused naming
/// the header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_s_own_latency_targets_choose_its_pool() {
    let cpu = MockServer::start(Mode::Fast, Duration::ZERO);
    let gpu = MockServer::start(Mode::Fast, Duration::ZERO);
    // 50 prompt tokens a second: the CPU pool's first token is predicted at half a second or more.
    let toml = prefilling_at(&config(&[&cpu.url], &[&gpu.url], 2, ""), 50.0);
    let gw = Gateway::start(&toml, None).await;
    let c = client();
    let lax = ("x-strata-sla", "lax");
    let (status, route, body) = send_with(
        &c,
        &gw.base,
        &[lax, ("x-slo-ttft-ms", "200")],
        &chat("tight", false),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        route.starts_with("pool=gpu;")
            && route.contains("cpu_predicted_miss")
            && route.contains("targets=ttft:200ms:request,e2e:600000ms:class;"),
        "{route}"
    );
    // The CPU pool decodes at 200 ms a token (before any answer from it has taught its correction).
    let (status, route, _) = send_with(
        &c,
        &gw.base,
        &[lax, ("x-slo-tpot-ms", "50")],
        &chat("slow", false),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        route.starts_with("pool=gpu;")
            && route.contains("cpu_predicted_slow_tokens")
            && route.contains("targets=e2e:600000ms:class,tpot:50ms:request;"),
        "{route}"
    );
    let (status, route, _) = send_with(
        &c,
        &gw.base,
        &[lax, ("x-slo-ttft-ms", "60000")],
        &chat("loose", false),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        route.starts_with("pool=cpu;")
            && route.contains("cpu_meets_sla")
            && route.contains("targets=ttft:60000ms:request,e2e:600000ms:class;"),
        "{route}"
    );
    let (_, route, _) = send(&c, &gw.base, "lax", &chat("plain", false)).await;
    assert!(
        route.starts_with("pool=cpu;") && route.contains("targets=e2e:600000ms:class;"),
        "{route}"
    );
    let (status, _, body) = send_with(
        &c,
        &gw.base,
        &[lax, ("x-slo-ttft-ms", "fast")],
        &chat("bad", false),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body.contains("x-slo-ttft-ms") && body.contains("`fast`"),
        "{body}"
    );
    assert_eq!(gpu.answered(), ["tight", "slow"]);
    assert_eq!(cpu.answered(), ["loose", "plain"]);
    gw.shutdown().await;
}

/// Every answered request is scored against its prediction and teaches its endpoint's correction:
/// the decision rows carry the raw and the corrected predictions beside the observed latencies (and
/// what the GPU pool was predicted to give), the metrics hold both errors, and after a few requests
/// the corrected prediction is closer than the raw one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predictions_are_scored_and_corrected_online() {
    // First chunk after 250 ms, then one every 50 ms: slower to start and faster to decode than the
    // pool's service model (200 prompt tokens/s, 200 ms a token) says.
    let cpu = MockServer::start(Mode::Fast, Duration::from_millis(200));
    let gpu = MockServer::start(Mode::Fast, Duration::ZERO);
    let store = Arc::new(FakeStore::default());
    let toml = prefilling_at(&config(&[&cpu.url], &[&gpu.url], 4, ""), 200.0);
    let gw = Gateway::start(&toml, Some(store.clone() as Arc<dyn Sink>)).await;
    let c = client();
    const N: usize = 15;
    let mut sent = Vec::with_capacity(N);
    for i in 0..N {
        let before = chrono::Utc::now();
        let (status, route, _) = send(&c, &gw.base, "lax", &chat(&format!("s{i}"), true)).await;
        sent.push((before, chrono::Utc::now()));
        assert_eq!(status, StatusCode::OK);
        assert!(route.starts_with("pool=cpu;"), "{route}");
    }
    for _ in 0..100 {
        if store.decisions.lock().unwrap().len() == N {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut rows = store.decisions.lock().unwrap().clone();
    assert_eq!(rows.len(), N);
    rows.sort_by_key(|r| r.decided_at);
    let error = |p: Option<f64>, o: Option<f64>| (p.unwrap() - o.unwrap()).abs() / o.unwrap();
    let first = &rows[0];
    assert_eq!(
        first.predicted_ttft_ms, first.raw_predicted_ttft_ms,
        "nothing learned yet"
    );
    // A row is stamped when its request was routed, early in the quarter of a second it took, not
    // when it ended.
    for (r, (before, after)) in rows.iter().zip(&sent) {
        let midway = *before + (*after - *before) / 2;
        assert!(
            *before <= r.decided_at && r.decided_at < midway,
            "sent {before}, decided {}, back {after}",
            r.decided_at
        );
    }
    for r in &rows {
        assert!(r.observed_ttft_ms.is_some_and(|t| t >= 200.0), "{r:?}");
        let others = r
            .other_pools
            .as_ref()
            .expect("the other pools' predictions");
        assert_eq!(others[0]["pool"], "gpu", "{others}");
        assert!(others[0]["ttft_ms"].as_f64().is_some_and(|t| t > 0.0));
    }
    let last = &rows[N - 5..];
    let mean = |f: &dyn Fn(&NewGatewayDecision) -> f64| {
        last.iter().map(f).sum::<f64>() / last.len() as f64
    };
    let raw_ttft = mean(&|r| error(r.raw_predicted_ttft_ms, r.observed_ttft_ms));
    let corrected_ttft = mean(&|r| error(r.predicted_ttft_ms, r.observed_ttft_ms));
    let raw_e2e = mean(&|r| error(r.raw_predicted_latency_ms, r.observed_latency_ms));
    let corrected_e2e = mean(&|r| error(r.predicted_latency_ms, r.observed_latency_ms));
    assert!(
        corrected_ttft < 0.15 && corrected_ttft < raw_ttft / 2.0,
        "TTFT error: raw {raw_ttft}, corrected {corrected_ttft}"
    );
    assert!(
        corrected_e2e < 0.15 && corrected_e2e < raw_e2e / 2.0,
        "E2E error: raw {raw_e2e}, corrected {corrected_e2e}"
    );
    let metrics = c
        .get(format!("{}/metrics", gw.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for prediction in ["raw", "corrected"] {
        for latency in ["ttft", "e2e"] {
            let count = metrics
                .lines()
                .find(|l| {
                    l.starts_with("strata_gateway_prediction_relative_error_count")
                        && l.contains(&format!("prediction=\"{prediction}\""))
                        && l.contains(&format!("latency=\"{latency}\""))
                })
                .unwrap_or_else(|| panic!("no {latency} {prediction} count in {metrics}"));
            assert!(count.ends_with(&format!(" {N}")), "{count}");
        }
    }
    let factor = |part: &str| -> f64 {
        let line = metrics
            .lines()
            .find(|l| {
                l.starts_with("strata_gateway_correction_factor")
                    && l.contains(&format!("part=\"{part}\""))
            })
            .unwrap_or_else(|| panic!("no {part} correction in {metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(factor("first_token") > 1.2, "{metrics}");
    assert!(factor("decode") < 0.8, "{metrics}");
    gw.shutdown().await;
}
