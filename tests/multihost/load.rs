//! The load generator: requests with ids of their own spread over the gateway replicas, a client that
//! retries a request on the other replica (same id) when its replica does not answer, and the tally of
//! what came back.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use serde_json::{Value, json};

/// What one request got in the end.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// A complete completion (its output tokens).
    Answered { output_tokens: u64 },
    /// An error status with an OpenAI-style JSON error body.
    CleanError { status: u16 },
    /// No answer, or one that was cut or malformed.
    Lost { reason: String },
}

/// One request's id, SLA class and outcome.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub(crate) id: String,
    pub(crate) answer: Answer,
    /// Attempts made (more than one: retried on another replica).
    pub(crate) attempts: u32,
    /// When the answer came, since the run started.
    pub(crate) at: Duration,
}

/// The load of one phase.
pub(crate) struct Load<'a> {
    /// Base URLs of the gateway replicas.
    pub(crate) gateways: &'a [String],
    /// Model name.
    pub(crate) model: &'a str,
    /// Id prefix of this phase's requests.
    pub(crate) prefix: &'a str,
    /// Requests to send.
    pub(crate) requests: usize,
    /// Requests in flight at once.
    pub(crate) concurrency: usize,
    /// SLA class header.
    pub(crate) class: &'a str,
    /// Output tokens per request.
    pub(crate) max_tokens: u32,
}

/// Attempts per request, alternating replicas.
const ATTEMPTS: u32 = 6;

impl Load<'_> {
    /// Sends every request (bounded by count, and each by a timeout) and returns the outcomes in id
    /// order; `done` counts finished requests as they finish.
    pub(crate) async fn run(&self, done: &AtomicUsize) -> Vec<Outcome> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(self.concurrency)
            .build()
            .expect("an HTTP client");
        let start = std::time::Instant::now();
        let next = AtomicUsize::new(0);
        let workers = (0..self.concurrency).map(|_| async {
            let mut outcomes = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= self.requests {
                    return outcomes;
                }
                let id = format!("{}-{n:05}", self.prefix);
                let (answer, attempts) = self.send(&client, &id, n).await;
                outcomes.push(Outcome {
                    id,
                    answer,
                    attempts,
                    at: start.elapsed(),
                });
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
        let mut all: Vec<Outcome> = futures_util::future::join_all(workers)
            .await
            .into_iter()
            .flatten()
            .collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// One request, retried on the next replica while replicas give no HTTP answer.
    async fn send(&self, client: &reqwest::Client, id: &str, n: usize) -> (Answer, u32) {
        let body = json!({
            "model": self.model,
            "prompt": format!("Request {n}: the capital of France is"),
            "max_tokens": self.max_tokens,
            "temperature": 0,
        });
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            let gateway = &self.gateways[(n + attempt as usize) % self.gateways.len()];
            let sent = client
                .post(format!("{gateway}/v1/completions"))
                .header("x-request-id", id)
                .header("x-strata-sla", self.class)
                .json(&body)
                .send()
                .await;
            match sent {
                Ok(response) => return (classify(response).await, attempt + 1),
                Err(e) => {
                    last = format!("{gateway}: {e}");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt + 1))).await;
                }
            }
        }
        (Answer::Lost { reason: last }, ATTEMPTS)
    }
}

/// A response as an answer, a clean error, or lost when its body is cut or not what it should be.
async fn classify(response: reqwest::Response) -> Answer {
    let status = response.status().as_u16();
    let body: Value = match response.json().await {
        Ok(v) => v,
        Err(e) => {
            return Answer::Lost {
                reason: format!("status {status}, body unreadable: {e}"),
            };
        }
    };
    if status == 200 {
        let text = body["choices"][0]["text"].as_str();
        let tokens = body["usage"]["completion_tokens"].as_u64();
        return match (text, tokens) {
            (Some(_), Some(output_tokens)) if output_tokens > 0 => {
                Answer::Answered { output_tokens }
            }
            _ => Answer::Lost {
                reason: format!("200 without a completion: {body}"),
            },
        };
    }
    if body["error"]["message"].is_string() {
        Answer::CleanError { status }
    } else {
        Answer::Lost {
            reason: format!("status {status} without an error body: {body}"),
        }
    }
}
