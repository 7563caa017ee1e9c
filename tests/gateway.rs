//! `strata gateway` in front of two real `strata serve` engines on the real model, one as the CPU pool
//! and one standing in for the GPU fallback: a tight-SLA request goes to CPU while the pool is idle and
//! to GPU while it is loaded, and crossing the budget threshold caps the GPU share so it stays on CPU.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{SMOLLM2, ServerProcess};

/// A `strata gateway` process on `config`, killed when dropped.
fn start_gateway(config: &std::path::Path) -> ServerProcess {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_strata"));
    command
        .arg("gateway")
        .arg("--config")
        .arg(config)
        .arg("--no-store");
    ServerProcess::listening(command)
}

fn config(cpu: &str, gpu: &str) -> String {
    format!(
        r#"
listen = "127.0.0.1:0"
default_class = "lax"

[health]
interval_ms = 500

[[class]]
name = "lax"
e2e_p99_ms = 600000
priority = 1

[[class]]
name = "tight"
ttft_p99_ms = 300
priority = 2

[[pool]]
name = "cpu"
kind = "cpu"
models = ["{SMOLLM2}"]
max_concurrency = 4
price_per_hour_usd = 0.01
tokens_per_s = 100
first_byte_timeout_ms = 120000
idle_timeout_ms = 120000
service = {{ slots = 4, prefill_tokens_per_s = 300.0, tpot_by_batch = [[1.0, 0.02], [4.0, 0.05]], copies = 1.0 }}
[[pool.endpoint]]
url = "{cpu}"
name = "cpu-0"

[[pool]]
name = "gpu"
kind = "gpu"
models = ["{SMOLLM2}"]
price_per_million_tokens_usd = 1000.0
ttft_p99_ms = 200
tpot_p99_ms = 10
first_byte_timeout_ms = 120000
idle_timeout_ms = 120000
[[pool.endpoint]]
url = "{gpu}"
name = "gpu-0"

# One GPU answer (about 40 tokens at $1000 per 1M) crosses half of this budget.
[budget]
per_day_usd = 0.05
[[budget.action]]
action = "cap_gpu_share"
at_spent_fraction = 0.5
max_share = 0.0
"#
    )
}

async fn ask(c: &reqwest::Client, base: &str, class: &str, max_tokens: u32) -> (String, Value) {
    let r = c
        .post(format!("{base}/v1/chat/completions"))
        .header("x-strata-sla", class)
        .json(&json!({
            "model": SMOLLM2, "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": "Tell me about the history of bread."}],
        }))
        .send()
        .await
        .expect("the gateway answers");
    assert!(r.status().is_success(), "{}", r.status());
    let route = r.headers()["x-strata-route"].to_str().unwrap().to_owned();
    (route, r.json().await.expect("JSON"))
}

async fn dry_run(c: &reqwest::Client, base: &str) -> Value {
    c.post(format!("{base}/v1/route"))
        .header("x-strata-sla", "tight")
        .json(&json!({"model": SMOLLM2, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tight_sla_goes_to_cpu_when_idle_to_gpu_when_loaded_and_the_budget_caps_gpu() {
    let cpu = ServerProcess::start(&["--weights", "q8_0", "--threads", "1", "--max-batch", "4"]);
    let gpu = ServerProcess::start(&["--weights", "q8_0", "--threads", "1"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, config(&cpu.base, &gpu.base)).expect("writes the config");
    let gw = start_gateway(&path);
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap();

    let (route, v) = ask(&c, &gw.base, "tight", 8).await;
    assert!(route.starts_with("pool=cpu;"), "idle pool: {route}");
    assert!(
        v["usage"]["completion_tokens"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );

    // Eight long lax requests load the 4-slot CPU pool.
    let load: Vec<_> = (0..8)
        .map(|_| {
            let c = c.clone();
            let base = gw.base.clone();
            tokio::spawn(async move { ask(&c, &base, "lax", 96).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let d = dry_run(&c, &gw.base).await;
    assert_eq!(d["target"], "gpu", "loaded pool: {d}");
    let (route, _) = ask(&c, &gw.base, "tight", 8).await;
    assert!(
        route.starts_with("pool=gpu;") && route.contains("cpu_predicted_miss"),
        "loaded pool: {route}"
    );

    // That GPU answer spent over half the day's budget: the GPU share is capped, tight stays on CPU.
    let d = dry_run(&c, &gw.base).await;
    assert_eq!(d["target"], "cpu", "budget crossed: {d}");
    assert!(d["reasons"].to_string().contains("gpu_share_capped"), "{d}");

    for l in load {
        let (route, _) = l.await.expect("load request");
        assert!(route.starts_with("pool=cpu;"), "{route}");
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
        metrics.contains(
            "strata_gateway_requests_total{class=\"tight\",outcome=\"ok\",pool=\"gpu\"} 1"
        ),
        "{metrics}"
    );
}
