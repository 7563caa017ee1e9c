//! The hosts of one scenario: two engine hosts (`strata serve`), two gateway replicas
//! (`strata gateway` on one shared PostgreSQL), a GPU stand-in, and the client's host.

use std::{
    collections::HashMap,
    io::BufRead,
    net::Ipv4Addr,
    path::PathBuf,
    process::{Child, ChildStdin, Command, Stdio},
    time::{Duration, Instant},
};

use axum::{Json, Router, routing::get, routing::post};
use serde_json::{Value, json};

use crate::{
    common,
    net::{Host, Network},
    pg::Postgres,
};

/// Port every engine, gateway and the GPU stand-in listen on, each at its own address.
const PORT: u16 = 8000;
/// PostgreSQL's port on the root address.
const PG_PORT: u16 = 55432;

/// A `strata` process inside a namespace; killed on drop. Its standard input is held open: the
/// process exits when the test dies.
pub(crate) struct NsProcess {
    child: Option<Child>,
    _stdin: Option<ChildStdin>,
}

impl NsProcess {
    /// Spawns `command` and waits for its `listening on` line.
    fn spawn(mut command: Command) -> Self {
        let mut child = command
            .env_remove("RUST_LOG")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the process starts");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let mut reader = std::io::BufReader::new(stdout);
        let mut line = String::new();
        reader.read_line(&mut line).expect("reads its first line");
        assert!(
            line.contains("listening on"),
            "unexpected first line {line:?}"
        );
        // Keep draining its standard output so that it never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        Self {
            child: Some(child),
            _stdin: stdin,
        }
    }

    fn signal(&mut self, signal: rustix::process::Signal) {
        if let Some(mut child) = self.child.take() {
            let pid = rustix::process::Pid::from_child(&child);
            let _ = rustix::process::kill_process(pid, signal);
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL: a crash.
    pub(crate) fn kill(&mut self) {
        self.signal(rustix::process::Signal::KILL);
    }

    /// SIGTERM: the process drains and exits (as a Kubernetes pod being deleted).
    pub(crate) fn terminate(&mut self) {
        self.signal(rustix::process::Signal::TERM);
    }
}

impl Drop for NsProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One request's decisions in the store.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Decisions {
    /// Decision rows with its id.
    pub(crate) count: u64,
    /// Their summed cost, USD.
    pub(crate) cost_usd: f64,
}

/// The store's ledger total and decisions by request id, at one moment.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    pub(crate) total_usd: f64,
    decisions: HashMap<String, Decisions>,
}

impl Ledger {
    /// Decisions of the requests whose id starts with `prefix-`.
    pub(crate) fn decisions_with_prefix(&self, prefix: &str) -> HashMap<String, Decisions> {
        let prefix = format!("{prefix}-");
        self.decisions
            .iter()
            .filter(|(id, _)| id.starts_with(&prefix))
            .map(|(id, d)| (id.clone(), *d))
            .collect()
    }
}

/// The scenario's hosts and processes.
pub(crate) struct Cluster {
    pub(crate) engines: Vec<NsProcess>,
    pub(crate) gateways: Vec<NsProcess>,
    pub(crate) engine_hosts: Vec<Host>,
    gateway_hosts: Vec<Host>,
    pub(crate) client_host: Host,
    pub(crate) pg: Postgres,
    database: String,
    config: PathBuf,
    _dir: tempfile::TempDir,
    runtime: tokio::runtime::Runtime,
    // Last: the namespaces go after every process in them.
    _net: Network,
}

impl Cluster {
    /// Starts PostgreSQL, the GPU stand-in, two engines and two gateways; `budget` is an extra
    /// `[budget]` table for the gateways' file.
    pub(crate) fn start(budget: Option<&str>) -> Self {
        let mut net = Network::create().expect("a bridge");
        let pg = Postgres::start(net.root_ip(), PG_PORT).expect("PostgreSQL starts");
        let database = "strata".to_owned();
        pg.create_database(&database).expect("a database");
        let engine_hosts = vec![
            net.add_host("e1").expect("host e1"),
            net.add_host("e2").expect("host e2"),
        ];
        let gateway_hosts = vec![
            net.add_host("g1").expect("host g1"),
            net.add_host("g2").expect("host g2"),
        ];
        let gpu_host = net.add_host("gpu").expect("host gpu");
        let client_host = net.add_host("lg").expect("host lg");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        serve_gpu_stand_in(&runtime, &gpu_host);
        migrate(&pg.url(&database));
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("gateway.toml");
        std::fs::write(
            &config,
            gateway_config(&engine_hosts, gpu_host.ip, budget.unwrap_or("")),
        )
        .expect("writes the gateway's file");
        let mut cluster = Self {
            engines: Vec::new(),
            gateways: Vec::new(),
            engine_hosts,
            gateway_hosts,
            client_host,
            pg,
            database,
            config,
            _dir: dir,
            runtime,
            _net: net,
        };
        for i in 0..2 {
            let engine = cluster.start_engine(i);
            cluster.engines.push(engine);
        }
        for i in 0..2 {
            let gateway = cluster.start_gateway(i);
            cluster.gateways.push(gateway);
        }
        cluster.wait_until_routable();
        cluster
    }

    fn start_engine(&self, i: usize) -> NsProcess {
        let mut command = self.engine_hosts[i].command(env!("CARGO_BIN_EXE_strata"));
        command
            .arg("serve")
            .arg("--model")
            .arg(common::smollm2_path())
            .args(["--served-model-name", common::SMOLLM2])
            .args(["--weights", "q8_0", "--threads", "1", "--max-batch", "8"])
            .args(["--host", "0.0.0.0", "--port", &PORT.to_string()])
            .arg("--exit-with-stdin");
        NsProcess::spawn(command)
    }

    fn start_gateway(&self, i: usize) -> NsProcess {
        let mut command = self.gateway_hosts[i].command(env!("CARGO_BIN_EXE_strata"));
        command
            .arg("gateway")
            .arg("--config")
            .arg(&self.config)
            .arg("--database-url")
            .arg(self.pg.url(&self.database))
            .arg("--exit-with-stdin");
        NsProcess::spawn(command)
    }

    /// Engine `i` again, after a kill.
    pub(crate) fn restart_engine(&mut self, i: usize) {
        self.engines[i] = self.start_engine(i);
    }

    /// Gateway replica `i` again, after it stopped.
    pub(crate) fn restart_gateway(&mut self, i: usize) {
        self.gateways[i] = self.start_gateway(i);
    }

    /// `http://ADDR:PORT` of each gateway replica.
    pub(crate) fn gateway_urls(&self) -> Vec<String> {
        self.gateway_hosts
            .iter()
            .map(|h| format!("http://{}:{PORT}", h.ip))
            .collect()
    }

    /// Waits until both replicas see both engines up (health probes run every 500 ms).
    fn wait_until_routable(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        for url in self.gateway_urls() {
            loop {
                let health: Option<Value> = self.runtime.block_on(async {
                    reqwest::get(format!("{url}/health"))
                        .await
                        .ok()?
                        .json()
                        .await
                        .ok()
                });
                let cpu_up = health
                    .as_ref()
                    .and_then(|h| h["pools"][0]["endpoints_up"].as_u64());
                if cpu_up == Some(2) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "gateway {url} never saw both engines: {health:?}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Waits until every replica's accounting queue is empty and the store's decision count is
    /// steady (at most two minutes).
    pub(crate) fn wait_for_accounting(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut last = u64::MAX;
        loop {
            let queued: u64 = self
                .gateway_urls()
                .iter()
                .map(|url| self.accounting_queue(url))
                .sum();
            let rows = self.decision_rows();
            if queued == 0 && rows == last {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "accounting never settled: {queued} rows queued"
            );
            last = rows;
            std::thread::sleep(Duration::from_millis(700));
        }
    }

    fn accounting_queue(&self, url: &str) -> u64 {
        let text = self.runtime.block_on(async {
            reqwest::get(format!("{url}/metrics"))
                .await
                .ok()?
                .text()
                .await
                .ok()
        });
        text.as_deref()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("strata_gateway_accounting_queue "))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(u64::MAX / 4)
    }

    fn decision_rows(&self) -> u64 {
        let url = self.pg.url(&self.database);
        self.runtime.block_on(async {
            let pool = sqlx::PgPool::connect(&url)
                .await
                .expect("the store answers");
            let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM gateway_decisions")
                .fetch_one(&pool)
                .await
                .expect("counts decisions");
            pool.close().await;
            u64::try_from(n).expect("a count")
        })
    }

    /// The ledger's total and the decisions, now.
    pub(crate) fn ledger(&self) -> Ledger {
        let url = self.pg.url(&self.database);
        self.runtime.block_on(async {
            let pool = sqlx::PgPool::connect(&url)
                .await
                .expect("the store answers");
            let total: f64 = sqlx::query_scalar(
                "SELECT COALESCE(SUM(amount_usd), 0)::float8 FROM budget_ledger",
            )
            .fetch_one(&pool)
            .await
            .expect("sums the ledger");
            let rows: Vec<(String, i64, f64)> = sqlx::query_as(
                "SELECT request_id, COUNT(*), SUM(cost_usd)::float8 FROM gateway_decisions \
                 GROUP BY request_id",
            )
            .fetch_all(&pool)
            .await
            .expect("reads the decisions");
            pool.close().await;
            Ledger {
                total_usd: total,
                decisions: rows
                    .into_iter()
                    .map(|(id, count, cost_usd)| {
                        let count = u64::try_from(count).expect("a count");
                        (id, Decisions { count, cost_usd })
                    })
                    .collect(),
            }
        })
    }
}

/// Applies the store's migrations once, as the deployment's migration Job does.
fn migrate(url: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["store", "status", "--database-url", url])
        .output()
        .expect("strata store status runs");
    assert!(
        out.status.success(),
        "migrations: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An OpenAI-style completion server standing in for a GPU endpoint: every answer has 4 tokens.
fn serve_gpu_stand_in(runtime: &tokio::runtime::Runtime, host: &Host) {
    let listener = host.run(|| {
        std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT)).expect("binds in the namespace")
    });
    listener.set_nonblocking(true).expect("non-blocking");
    let app = Router::new()
        .route(
            "/v1/models",
            get(|| async { Json(json!({"object": "list", "data": [{"id": common::SMOLLM2, "object": "model"}]})) }),
        )
        .route(
            "/v1/completions",
            post(|| async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Json(json!({
                    "id": "cmpl-gpu", "object": "text_completion", "model": common::SMOLLM2,
                    "choices": [{"index": 0, "text": " Paris, of course", "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14},
                }))
            }),
        );
    runtime.spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
        axum::serve(listener, app)
            .await
            .expect("the GPU stand-in serves");
    });
}

/// The gateways' file: a CPU pool of the two engines and a GPU fallback pool.
fn gateway_config(engines: &[Host], gpu: Ipv4Addr, budget: &str) -> String {
    let model = common::SMOLLM2;
    let endpoints: String = engines
        .iter()
        .enumerate()
        .map(|(i, h)| {
            format!(
                "[[pool.endpoint]]\nurl = \"http://{}:{PORT}\"\nname = \"e{}\"\n",
                h.ip,
                i + 1
            )
        })
        .collect();
    format!(
        r#"
listen = "0.0.0.0:{PORT}"
default_class = "standard"

[retry]
attempts = 3
backoff_ms = 10

[breaker]
failures = 3
open_ms = 1000

[health]
interval_ms = 500
timeout_ms = 500
path = "/v1/models"

[store]
refresh_ms = 250
batch = 256
flush_ms = 200
queue = 100000

[[class]]
name = "standard"
e2e_p99_ms = 20000
priority = 1

[[class]]
name = "batch"
e2e_p99_ms = 600000
priority = 0

[[pool]]
name = "cpu"
kind = "cpu"
models = ["{model}"]
max_concurrency = 8
price_per_hour_usd = 0.40
tokens_per_s = 200
connect_timeout_ms = 300
first_byte_timeout_ms = 30000
idle_timeout_ms = 30000
service = {{ slots = 8, prefill_tokens_per_s = 300.0, tpot_by_batch = [[1.0, 0.015], [8.0, 0.04]], copies = 1.0 }}
{endpoints}
[[pool]]
name = "gpu"
kind = "gpu"
models = ["{model}"]
max_concurrency = 64
price_per_million_tokens_usd = 0.60
ttft_p99_ms = 250
tpot_p99_ms = 12
connect_timeout_ms = 300
first_byte_timeout_ms = 30000
[[pool.endpoint]]
url = "http://{gpu}:{PORT}"
name = "gpu"

{budget}
"#
    )
}
