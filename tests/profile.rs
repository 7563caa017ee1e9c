//! `strata profile --sweep` on the real model: a 3 weight types x 2 thread counts x 2 batch sizes sweep
//! runs end to end, each config as a real server driven over HTTP, and lands in the store (SQLite and
//! PostgreSQL) and in the summary table; a second run reuses what this host already measured.

use std::process::Command;

use strata_controller::store::{self, testing::with_postgres};

use crate::common::smollm2_path;

const SWEEP: &str = r#"
model = "MODEL"
weights = ["q8_0", "q4_1", "f16"]
threads = [1, 2]
max_batch = [1, 4]
kv_mem_mib = [32]
quality = true

[sla]
ttft_ms = 60000.0

[[shape]]
name = "tiny"
prompt_tokens = 8
output_tokens = 4
arrival = { kind = "closed", concurrency = 2 }
requests = 2
"#;

fn sweep_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("sweep.toml");
    let model = smollm2_path();
    std::fs::write(&path, SWEEP.replace("MODEL", &model.display().to_string())).expect("write");
    path
}

fn profile(url: &str, sweep: &std::path::Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["--database-url", url, "profile", "--sweep"])
        .arg(sweep)
        .env_remove("RUST_LOG")
        .output()
        .expect("strata profile runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "strata profile failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

async fn stored_runs(url: &str) -> usize {
    let store = store::open(url).await.expect("store opens");
    let mut runs = 0;
    for model in store.list_models().await.expect("models") {
        for config in store
            .list_configs_for_model(model.id)
            .await
            .expect("configs")
        {
            runs += store
                .list_profile_runs_for_config(config.id)
                .await
                .expect("runs")
                .len();
        }
    }
    store.close().await;
    runs
}

async fn stored_quality(url: &str) -> usize {
    let store = store::open(url).await.expect("store opens");
    let mut scores = 0;
    for model in store.list_models().await.expect("models") {
        for config in store
            .list_configs_for_model(model.id)
            .await
            .expect("configs")
        {
            let results = store
                .list_quality_results_for_config(config.id)
                .await
                .expect("quality");
            for q in &results {
                assert!(q.perplexity > 1.0 && q.perplexity < 100.0, "{q:?}");
                let agreement = q.top1_agreement.expect("agreement against f32");
                assert!((0.5..=1.0).contains(&agreement), "{q:?}");
            }
            scores += results.len();
        }
    }
    store.close().await;
    scores
}

async fn sweep_lands_in(url: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sweep = sweep_file(dir.path());
    let table = profile(url, &sweep);
    let rows: Vec<&str> = table.lines().filter(|l| l.contains(" tiny ")).collect();
    assert_eq!(rows.len(), 12, "one row per config:\n{table}");
    for weights in ["q8_0", "q4_1", "f16"] {
        for threads in ["t1", "t2"] {
            for batch in ["b1", "b4"] {
                let name = format!("{weights} {threads} {batch} kv32");
                assert!(
                    rows.iter().any(|r| r.starts_with(&name)),
                    "{name} missing:\n{table}"
                );
            }
        }
    }
    assert!(table.contains("host: "), "{table}");
    assert_eq!(stored_runs(url).await, 12);
    for weights in ["q8_0", "q4_1", "f16"] {
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(&format!("quality {weights}"))
                    && l.contains("top-1 agreement with f32")),
            "{weights} quality line missing:\n{table}"
        );
    }
    assert_eq!(
        stored_quality(url).await,
        12,
        "a quality score for every config"
    );
    // Measured on this host and engine version already: nothing runs again.
    let again = profile(url, &sweep);
    assert_eq!(again.matches("(stored)").count(), 12, "{again}");
    assert_eq!(stored_runs(url).await, 12);
}

#[tokio::test]
async fn a_sweep_runs_end_to_end_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    sweep_lands_in(&url).await;
}

#[tokio::test]
async fn a_sweep_runs_end_to_end_on_postgres() {
    with_postgres("profile", |url| async move { sweep_lands_in(&url).await }).await;
}

fn worker(url: &str, name: &str) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "--database-url",
            url,
            "worker",
            "--name",
            name,
            "--lease-secs",
            "2",
            "--exit-when-idle",
        ])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("strata worker starts")
}

/// Two workers share one PostgreSQL queue: no config is measured twice, and when one is killed in
/// the middle of a job, the other takes the job over once its lease runs out and finishes it.
#[tokio::test]
async fn two_workers_split_a_sweep_and_a_killed_one_loses_nothing() {
    with_postgres("workers", |url| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let sweep = sweep_file(dir.path());
        let text = std::fs::read_to_string(&sweep).expect("sweep");
        std::fs::write(
            &sweep,
            text.replace("[\"q8_0\", \"q4_1\", \"f16\"]", "[\"q8_0\", \"q4_1\"]")
                .replace("requests = 2", "requests = 6"),
        )
        .expect("write");
        let queued = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args([
                "--database-url",
                &url,
                "profile",
                "--enqueue",
                "--json",
                "--sweep",
            ])
            .arg(&sweep)
            .output()
            .expect("enqueue");
        assert!(
            queued.status.success(),
            "{}",
            String::from_utf8_lossy(&queued.stderr)
        );
        let store = store::open(&url).await.expect("store");
        assert_eq!(store.list_profile_jobs(None).await.expect("jobs").len(), 8);
        let mut a = worker(&url, "worker-a");
        let mut b = worker(&url, "worker-b");
        // Kill worker A in the middle of a job it holds.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let running = store
                .list_profile_jobs(Some(store::JobStatus::Running))
                .await
                .expect("jobs");
            if running
                .iter()
                .any(|j| j.claimed_by.as_deref() == Some("worker-a"))
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "worker A never claimed a job"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        a.kill().expect("kill worker A");
        let _ = a.wait();
        let status = tokio::task::spawn_blocking(move || b.wait())
            .await
            .expect("join")
            .expect("wait");
        assert!(status.success(), "worker B failed");
        let jobs = store.list_profile_jobs(None).await.expect("jobs");
        assert!(
            jobs.iter().all(|j| j.status == store::JobStatus::Done),
            "every job done: {jobs:?}"
        );
        assert!(
            jobs.iter()
                .any(|j| j.attempts == 2 && j.claimed_by.as_deref() == Some("worker-b")),
            "worker B took over worker A's job: {jobs:?}"
        );
        let mut runs_per_config = Vec::new();
        for model in store.list_models().await.expect("models") {
            for config in store
                .list_configs_for_model(model.id)
                .await
                .expect("configs")
            {
                runs_per_config.push(
                    store
                        .list_profile_runs_for_config(config.id)
                        .await
                        .expect("runs")
                        .len(),
                );
            }
        }
        assert_eq!(
            runs_per_config,
            vec![1; 8],
            "each config measured exactly once"
        );
        store.close().await;
    })
    .await;
}

/// `strata profile --endpoint` against a real engine server, for a fixed duration: the figures are
/// printed and recorded as an endpoint run (not as an engine config), under the endpoint's URL and model.
#[tokio::test]
async fn an_endpoint_profiled_for_a_duration_is_recorded_apart_from_configs() {
    let server = crate::common::ServerProcess::start(&["--threads", "2", "--max-batch", "4"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    let output = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "--database-url",
            &url,
            "profile",
            "--endpoint",
            &server.base,
        ])
        .args(["--model", crate::common::SMOLLM2, "--token-prompts"])
        .args(["--prompt-tokens", "16", "--output-tokens", "8"])
        .args([
            "--concurrency",
            "2",
            "--duration",
            "3",
            "--warmup",
            "1",
            "--json",
        ])
        .env_remove("RUST_LOG")
        .output()
        .expect("strata profile runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the report is JSON");
    let requests = report["requests"].as_u64().expect("a request count");
    assert!(requests >= 2, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert!(report["duration_s"].as_f64().expect("duration") >= 3.0);
    assert!(stderr.contains("recorded as endpoint run"), "{stderr}");

    let store = store::open(&url).await.expect("store opens");
    let endpoints = store.list_endpoints().await.expect("endpoints");
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0].base_url, server.base);
    assert_eq!(endpoints[0].model_name, crate::common::SMOLLM2);
    let runs = store
        .list_endpoint_runs(endpoints[0].id)
        .await
        .expect("endpoint runs");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].request_count as u64, requests);
    assert_eq!(runs[0].workload_shape["duration_s"], 3.0);
    assert!(runs[0].output_tokens_per_s > 0.0 && runs[0].ttft_p99_ms > 0.0);
    assert!(
        runs[0].report["records"].is_null(),
        "per-request records stay out"
    );
    assert!(
        store.list_models().await.expect("models").is_empty(),
        "no engine config recorded"
    );
    store.close().await;
}
