//! `strata serve` on the real model over real HTTP: batching does not change greedy outputs, a cached
//! prompt prefix cuts the time to first token, and the official OpenAI Python client works unchanged.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::common::{SMOLLM2, ServerProcess, in_ci};

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .expect("client")
}

async fn complete(client: &reqwest::Client, base: &str, body: Value) -> Value {
    let response = client
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .expect("sends");
    let status = response.status();
    let value: Value = response.json().await.expect("JSON");
    assert!(status.is_success(), "{status}: {value}");
    value
}

fn prompts() -> Vec<(String, u32)> {
    let topics = [
        "The history of the printing press",
        "How bees make honey",
        "A recipe for bread",
        "Why the sky is blue",
    ];
    (0..16)
        .map(|i| {
            let topic = topics[i % topics.len()];
            let detail = " Explain it step by step, with examples.".repeat(1 + i % 5);
            (format!("{topic}.{detail} Answer:"), 8 + (i as u32 * 5) % 29)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_concurrent_greedy_requests_equal_one_at_a_time() {
    let server =
        ServerProcess::start(&["--weights", "q8_0", "--threads", "2", "--max-batch", "16"]);
    let client = client();
    let body = |prompt: &str, max_tokens: u32| json!({"model": SMOLLM2, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0});
    let mut alone = Vec::new();
    for (prompt, max_tokens) in prompts() {
        let v = complete(&client, &server.base, body(&prompt, max_tokens)).await;
        alone.push(v["choices"][0]["text"].as_str().expect("text").to_owned());
    }
    let together = futures_util::future::join_all(prompts().into_iter().map(|(prompt, n)| {
        let client = client.clone();
        let base = server.base.clone();
        let body = body(&prompt, n);
        async move { complete(&client, &base, body).await }
    }))
    .await;
    for (i, v) in together.iter().enumerate() {
        assert_eq!(
            v["choices"][0]["text"].as_str(),
            Some(alone[i].as_str()),
            "request {i}: batched output differs from its output alone"
        );
    }
}

/// Time to the first streamed chunk and the usage of one streamed completion.
async fn first_token_time(client: &reqwest::Client, base: &str, prompt: &str) -> (Duration, Value) {
    let started = Instant::now();
    let response = client
        .post(format!("{base}/v1/completions"))
        .json(&json!({
            "model": SMOLLM2, "prompt": prompt, "max_tokens": 2, "temperature": 0,
            "stream": true, "stream_options": {"include_usage": true},
        }))
        .send()
        .await
        .expect("sends");
    assert!(response.status().is_success());
    let mut body = response.bytes_stream();
    let mut ttft = None;
    let mut text = String::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.expect("chunk");
        if ttft.is_none() && String::from_utf8_lossy(&chunk).contains("\"text\"") {
            ttft = Some(started.elapsed());
        }
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let usage = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|v| v["usage"].is_object())
        .expect("a usage chunk")["usage"]
        .clone();
    (ttft.expect("a token arrived"), usage)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_512_token_prefix_cuts_time_to_first_token() {
    let server = ServerProcess::start(&["--weights", "q8_0", "--threads", "2"]);
    let client = client();
    let shared = "You are a careful assistant. Read the following notes about the city archive, its \
                  opening hours, the rules for visitors and the history of the building, then answer. "
        .repeat(16);
    let (cold, cold_usage) = first_token_time(
        &client,
        &server.base,
        &format!("{shared}Question: when does it open?"),
    )
    .await;
    let (warm, warm_usage) = first_token_time(
        &client,
        &server.base,
        &format!("{shared}Question: who built it?"),
    )
    .await;
    let prompt_tokens = cold_usage["prompt_tokens"].as_u64().expect("count");
    let cached = warm_usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached");
    eprintln!(
        "prefix cache: {prompt_tokens}-token prompt, cold TTFT {:.1} ms, warm TTFT {:.1} ms \
         ({cached} tokens reused), speed-up {:.1}x",
        cold.as_secs_f64() * 1e3,
        warm.as_secs_f64() * 1e3,
        cold.as_secs_f64() / warm.as_secs_f64()
    );
    assert!(
        prompt_tokens >= 512,
        "the shared prefix is at least 512 tokens: {prompt_tokens}"
    );
    assert_eq!(cold_usage["prompt_tokens_details"]["cached_tokens"], 0);
    assert!(
        cached >= 496,
        "the prefix's full blocks are reused: {cached}"
    );
    assert!(
        warm * 3 <= cold,
        "a cached prefix must make the first token at least 3x sooner: cold {cold:?}, warm {warm:?}"
    );
}

#[test]
fn the_official_openai_python_client_works() {
    let has_openai = std::process::Command::new("python3")
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_openai {
        assert!(
            !in_ci(),
            "CI must have the `openai` Python package (pip install openai)"
        );
        eprintln!("skipped: the `openai` Python package is not installed (pip install openai)");
        return;
    }
    let server = ServerProcess::start(&[
        "--weights",
        "q8_0",
        "--threads",
        "2",
        "--api-key",
        "sk-strata-test",
    ]);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/openai_client.py"
    );
    let output = std::process::Command::new("python3")
        .args([
            script,
            &format!("{}/v1", server.base),
            SMOLLM2,
            "sk-strata-test",
        ])
        .output()
        .expect("python3 runs");
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success(),
        "the OpenAI client failed:\n{out}\n{err}"
    );
    assert!(out.contains("openai client: ok"), "{out}");
}

/// `--numa` applies a placement policy and `/health` reports it with the host's node count; a node the
/// host lacks is refused at start with a message naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numa_placement_is_applied_reported_and_checked() {
    let nodes = strata_engine::placement::Topology::host().nodes.len();
    for policy in ["pin", "node=0", "interleave"] {
        let server = ServerProcess::start(&["--numa", policy, "--threads", "2", "--kv-mem", "16"]);
        let health: Value = client()
            .get(format!("{}/health", server.base))
            .send()
            .await
            .expect("health answers")
            .json()
            .await
            .expect("JSON");
        let expected = format!(
            "{policy} ({nodes} NUMA node{})",
            if nodes == 1 { "" } else { "s" }
        );
        assert_eq!(health["placement"], expected.as_str(), "{health}");
    }
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["serve", "--model"])
        .arg(crate::common::smollm2_path())
        .args(["--numa", "node=4096", "--port", "0"])
        .env_remove("RUST_LOG")
        .output()
        .expect("strata serve runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("NUMA node 4096 does not exist"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
